//! `GET /docs`: the API's OpenAPI document (`/openapi.json`, the one the API serves, with this
//! coordinator's limits in it) rendered by Swagger UI.
//!
//! Swagger UI's files come from the `utoipa-swagger-ui` crate's vendored copy, built into the
//! binary: nothing is downloaded at build time or fetched from a CDN by the browser. Like the
//! console, these routes hold no data and need no key (a request made from the page's "try it
//! out" carries the key its user authorizes with), and are merged next to the API.

use axum::Router;
use axum::http::{HeaderValue, header};
use utoipa_swagger_ui::{Config, SwaggerUi};

/// Where the page is served.
pub const PATH: &str = "/docs";

/// What the page may load: Swagger UI's own files and the document, from this origin only.
/// Swagger UI's stylesheet and its SVG icons are inline, its scripts are not.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /docs` (a redirect to `/docs/`), `/docs/` and Swagger UI's files below it.
pub fn router() -> Router {
    let ui = SwaggerUi::new(PATH).config(
        Config::from("/openapi.json")
            .try_it_out_enabled(true)
            .persist_authorization(false),
    );
    Router::from(ui).layer(tower_http::set_header::SetResponseHeaderLayer::overriding(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(path: &str) -> (StatusCode, Option<String>, String) {
        let response = super::router()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let csp = response
            .headers()
            .get("content-security-policy")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, csp, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_page_and_its_files_come_from_the_binary_and_read_the_api_document() {
        let (status, _, _) = get("/docs").await;
        assert_eq!(
            status,
            StatusCode::SEE_OTHER,
            "/docs sends the browser to /docs/"
        );
        let (status, csp, page) = get("/docs/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(csp.unwrap().contains("script-src 'self';"));
        assert!(page.contains("swagger-ui-bundle.js"), "{page}");
        // Every file the page names is served from here: nothing from another origin.
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "{page}"
        );
        let (status, _, initializer) = get("/docs/swagger-initializer.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(initializer.contains("/openapi.json"), "{initializer}");
        let (status, _, bundle) = get("/docs/swagger-ui-bundle.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(bundle.len() > 100_000, "the whole of Swagger UI");
        let (status, _, _) = get("/docs/no-such-file.js").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
