//! What the crate's tests share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::Coordinator;

/// One request through the coordinator's router (JSON body): the status and the JSON answer
/// (`null` when it is not JSON).
pub(crate) async fn call(
    c: &Coordinator,
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = crate::router(c.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// Names that resolve to what the test says (changed whenever it likes), and the host
/// addresses it says: the egress guard's lookup in tests.
#[derive(Default)]
pub(crate) struct Names {
    names: Mutex<HashMap<String, Vec<IpAddr>>>,
    host: Mutex<Vec<IpAddr>>,
}

impl Names {
    pub(crate) fn set(&self, name: &str, addresses: &[&str]) {
        self.names.lock().unwrap().insert(
            name.to_owned(),
            addresses.iter().map(|a| a.parse().unwrap()).collect(),
        );
    }

    /// This host's interfaces have `addresses`.
    pub(crate) fn set_host(&self, addresses: &[&str]) {
        *self.host.lock().unwrap() = addresses.iter().map(|a| a.parse().unwrap()).collect();
    }
}

#[async_trait::async_trait]
impl crate::egress::Lookup for Names {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        self.names
            .lock()
            .unwrap()
            .get(host)
            .cloned()
            .ok_or_else(|| std::io::Error::other("no such name"))
    }

    fn host_addresses(&self) -> Vec<IpAddr> {
        self.host.lock().unwrap().clone()
    }
}
