//! API keys and tenants.
//!
//! With keys configured (`coordinator.api_keys`, tenant → key, from the environment:
//! `CODEGEN__COORDINATOR__API_KEYS__ACME=…`), every API request must carry one
//! (`Authorization: Bearer KEY` or `X-API-Key: KEY`) and sees only its tenant's jobs, batches,
//! executions and event streams: another tenant's id answers 404, as an unknown id does.
//! Without keys the API is open and everything belongs to no tenant.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use proto::api::ErrorCode;

use crate::Coordinator;
use crate::error::ApiError;

/// The caller's tenant, put into request extensions by the authentication layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenant(pub Option<String>);

impl Tenant {
    /// Whether something owned by `owner` is visible to this tenant.
    pub fn sees(&self, owner: &Option<String>) -> bool {
        &self.0 == owner
    }
}

/// The key of a path `/fusion/{key}/...` (SandboxFusion's client cannot send a header).
fn key_in_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/fusion/")?;
    let (key, _) = rest.split_once('/')?;
    (!key.is_empty()).then_some(key)
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

/// Compares in constant time, so response timing does not reveal key prefixes (a length
/// mismatch answers at once: a key's length is not a secret worth guarding).
fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.as_bytes().ct_eq(b.as_bytes()).into()
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
    let path = request.uri().path().to_owned();
    let Some(key) = presented_key(request.headers()).or_else(|| key_in_path(&path)) else {
        return ApiError::new(
            ErrorCode::ApiKeyRequired,
            "an API key is required: Authorization: Bearer KEY or X-API-Key: KEY (or, for \
             SandboxFusion's client, the path /fusion/KEY/run_code)",
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
        None => ApiError::new(ErrorCode::ApiKeyUnknown, "unknown API key").into_response(),
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
        assert_eq!(key_in_path("/fusion/k3/run_code"), Some("k3"));
        assert_eq!(key_in_path("/fusion//run_code"), None);
        assert_eq!(key_in_path("/run_code"), None);
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "abcd"));
        assert!(Tenant(Some("a".into())).sees(&Some("a".into())));
        assert!(!Tenant(Some("a".into())).sees(&Some("b".into())));
        assert!(!Tenant(Some("a".into())).sees(&None));
    }
}
