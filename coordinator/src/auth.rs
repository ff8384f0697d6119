//! API keys and tenants.
//!
//! With keys configured (`coordinator.api_keys`, tenant → key, from the environment:
//! `CODEGEN__COORDINATOR__API_KEYS__ACME=…`), every API request must carry one
//! (`Authorization: Bearer KEY` or `X-API-Key: KEY`) and sees only its tenant's jobs, batches,
//! executions and event streams: another tenant's id answers 404, as an unknown id does.
//! Without keys the API is open and everything belongs to no tenant.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Coordinator;
use crate::error::ApiError;

/// The caller's tenant, put into request extensions by [`authenticate`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenant(pub Option<String>);

impl Tenant {
    /// Whether something owned by `owner` is visible to this tenant.
    pub fn sees(&self, owner: &Option<String>) -> bool {
        &self.0 == owner
    }
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return value.strip_prefix("Bearer ").map(str::trim);
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Compares without an early exit, so response timing does not reveal key prefixes.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Middleware: resolves the API key to a tenant or answers 401.
pub(crate) async fn authenticate(
    State(c): State<Coordinator>,
    mut request: Request,
    next: Next,
) -> Response {
    if c.options.api_keys.is_empty() {
        request.extensions_mut().insert(Tenant(None));
        return next.run(request).await;
    }
    let Some(key) = presented_key(request.headers()) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "an API key is required: Authorization: Bearer KEY or X-API-Key: KEY",
        )
        .into_response();
    };
    let tenant = c
        .options
        .api_keys
        .iter()
        .find(|(_, k)| same(k, key))
        .map(|(t, _)| t.clone());
    match tenant {
        Some(tenant) => {
            request.extensions_mut().insert(Tenant(Some(tenant)));
            next.run(request).await
        }
        None => ApiError::new(StatusCode::UNAUTHORIZED, "unknown API key").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_either_header_and_compared_exactly() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer k1".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("k1"));
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "k2".parse().unwrap());
        assert_eq!(presented_key(&headers), Some("k2"));
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "abcd"));
        assert!(Tenant(Some("a".into())).sees(&Some("a".into())));
        assert!(!Tenant(Some("a".into())).sees(&Some("b".into())));
        assert!(!Tenant(Some("a".into())).sees(&None));
    }
}
