//! The web console: one page of HTML, CSS and plain JavaScript, embedded in the binary and
//! served at `GET /console` (assets under `/console/`), that calls the public API from the
//! browser (docs/console.md).
//!
//! The page holds no data: the user types an API key into it, which stays in the tab's
//! `sessionStorage` and goes out as `Authorization: Bearer KEY` with each API call. So these
//! routes need no key, are not part of the API (nor of its OpenAPI document), and are merged
//! next to it by [`crate::Coordinator::run`], as the operations routes are. Nothing is fetched
//! from anywhere else: the Content-Security-Policy allows scripts, styles and connections to
//! this origin only, and no inline script.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// What the console's pages may load: their own scripts, styles and API calls, images of the
/// origin or inlined (a session cell's PNG output), nothing inline, no frames, no forms posted.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its name under `/console/`, its media type and its bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file of the console (coordinator/console/), in the binary.
const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../console/index.html"),
    },
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/console.js"),
    },
    Asset {
        name: "charts.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/charts.js"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../console/console.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../console/favicon.svg"),
    },
];

/// `GET /console`, `/console/` (the page) and `/console/{file}` (its assets). No state and no
/// key: merge it next to the API.
pub fn router() -> Router {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/{*file}", get(asset))
}

async fn page() -> Response {
    serve("index.html")
}

async fn asset(Path(file): Path<String>) -> Response {
    serve(&file)
}

fn serve(name: &str) -> Response {
    let mut response = match ASSETS.iter().find(|asset| asset.name == name) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, asset.content_type),
                // A new binary's console is used at once; the files are small.
                (header::CACHE_CONTROL, "no-cache"),
            ],
            asset.body,
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such file in the console\n",
        )
            .into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
        let response = router()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_page_and_its_assets_are_served_with_their_types_and_a_strict_policy() {
        for (path, media_type) in [
            ("/console", "text/html"),
            ("/console/", "text/html"),
            ("/console/index.html", "text/html"),
            ("/console/console.js", "text/javascript"),
            ("/console/console.css", "text/css"),
            ("/console/favicon.svg", "image/svg+xml"),
        ] {
            let (status, headers, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(
                headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with(media_type),
                "{path}: {headers:?}"
            );
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
            let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(policy.contains("script-src 'self';"), "{policy}");
            assert!(!policy.contains("unsafe"), "{policy}");
            assert!(!body.is_empty(), "{path}");
        }
        let (status, headers, _) = get("/console/nothing.js").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }

    /// The policy forbids inline script, so the page must have none; and it loads nothing
    /// from another origin.
    #[test]
    fn the_page_has_no_inline_script_and_nothing_from_elsewhere() {
        let html = std::str::from_utf8(ASSETS[0].body).unwrap();
        let lower = html.to_ascii_lowercase();
        let scripts: Vec<&str> = lower.split("<script").skip(1).collect();
        assert!(!scripts.is_empty(), "the page loads its script");
        for script in scripts {
            let (attributes, rest) = script.split_once('>').unwrap();
            assert!(attributes.contains("src=\"/console/"), "{attributes}");
            assert!(rest.trim_start().starts_with("</script>"), "inline script");
        }
        assert!(
            !lower.contains("javascript:"),
            "a javascript: URL in the page"
        );
        for event in ["onclick=", "onload=", "onerror=", "onsubmit=", "style="] {
            assert!(!lower.contains(event), "inline {event} in the page");
        }
        for asset in ASSETS {
            // SVG's XML namespace is a name, not a fetch.
            let text =
                String::from_utf8_lossy(asset.body).replace("http://www.w3.org/2000/svg", "");
            for remote in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(remote), "{} mentions {remote}", asset.name);
            }
        }
        let scripts: Vec<&Asset> = ASSETS.iter().filter(|a| a.name.ends_with(".js")).collect();
        assert_eq!(scripts.len(), 2, "console.js and charts.js");
        for script in scripts {
            let text = std::str::from_utf8(script.body).unwrap();
            for unsafe_sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "eval(",
                "new Function",
                "document.write",
            ] {
                assert!(
                    !text.contains(unsafe_sink),
                    "{} uses {unsafe_sink}",
                    script.name
                );
            }
        }
    }
}
