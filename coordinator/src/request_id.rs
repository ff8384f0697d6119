//! `x-request-id`: the client's when it is a sane one, else made here (a UUIDv7); sent back
//! on every answer, named on the request's span, and carried by the tasks of the work it
//! creates, so that one id finds a request's lines in every process's log.

use std::convert::Infallible;

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use tower_http::request_id::{MakeRequestId, RequestId};

pub(crate) const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id taken from a client: ids go into log lines and task messages.
pub(crate) const MAX_CHARS: usize = 128;

/// Makes the id of a request that came without a usable one.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MakeV7;

impl MakeRequestId for MakeV7 {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&uuid::Uuid::now_v7().to_string())
            .ok()
            .map(RequestId::new)
    }
}

/// Middleware before the id is set: a client's id that is not 1 to [`MAX_CHARS`] visible
/// ASCII characters is dropped, so that one is made instead.
pub(crate) async fn drop_unusable(mut request: Request) -> Request {
    let usable = request.headers().get(&HEADER).map(|value| {
        let bytes = value.as_bytes();
        !bytes.is_empty() && bytes.len() <= MAX_CHARS && bytes.iter().all(u8::is_ascii_graphic)
    });
    if usable == Some(false) {
        request.headers_mut().remove(&HEADER);
    }
    request
}

/// The request's id, for the work it creates (`None` only outside the router).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestIdOf(pub(crate) Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for RequestIdOf {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<RequestId>()
                .and_then(|id| id.header_value().to_str().ok())
                .map(str::to_owned),
        ))
    }
}
