//! `Idempotency-Key` on the `POST`s that create work: a retry with the same key and body gets
//! the first answer again (header `Idempotent-Replayed: true`) and creates nothing; the same
//! key with another body is 409. Keys are per tenant and route and live as long as results
//! (`store.result_ttl`). A request that failed (not 2xx) releases its key, so its retry runs.
//! A streamed answer (`?stream=true`) is recorded as it streams and stored once it ended
//! (replayed whole); one cut off before its end releases the key.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use proto::api::ErrorCode;
use sha2::{Digest, Sha256};
use store::{Answer, Claimed};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::ApiError;

pub(crate) const HEADER: &str = "idempotency-key";
const REPLAYED: &str = "idempotent-replayed";
/// Longest key accepted.
const MAX_KEY_CHARS: usize = 255;
/// How much longer than `coordinator.wait` a claim in progress is kept.
const IN_PROGRESS_MARGIN: std::time::Duration = std::time::Duration::from_secs(300);

/// Middleware on the routes that create work.
pub(crate) async fn layer(State(c): State<Coordinator>, request: Request, next: Next) -> Response {
    let (Some((keys, ttl)), Some(key)) = (c.idempotency(), request.headers().get(HEADER)) else {
        return next.run(request).await;
    };
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let key = match key.to_str() {
        Ok(k)
            if !k.is_empty()
                && k.len() <= MAX_KEY_CHARS
                && k.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            k.to_owned()
        }
        _ => {
            return ApiError::new(
                ErrorCode::InvalidHeader,
                format!("Idempotency-Key: 1 to {MAX_KEY_CHARS} visible ASCII characters"),
            )
            .about("Idempotency-Key")
            .into_response();
        }
    };
    let query = request.uri().query().unwrap_or_default().to_owned();
    let streamed = query.split('&').any(|p| p == "stream=true");
    let tenant = request
        .extensions()
        .get::<Tenant>()
        .cloned()
        .unwrap_or_default();
    let path = request.uri().path().to_owned();
    let limit = if crate::api::BATCH_ROUTES.contains(&path.as_str()) {
        c.options.max_batch_body_bytes
    } else {
        c.options.max_body_bytes
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("body: larger than {limit} bytes"),
        )
        .into_response();
    };
    let mut hasher = Sha256::new();
    hasher.update(path.as_bytes());
    hasher.update(b"?");
    hasher.update(query.as_bytes());
    hasher.update(b"\n");
    hasher.update(&bytes);
    let hash = format!("{:x}", hasher.finalize());
    let scope = format!("{}:{path}:{key}", tenant.0.as_deref().unwrap_or("-"));
    // A claim whose coordinator died mid-request must not block its retries for a whole
    // `ttl`: it lives as long as a request can take, and the answer gets the full `ttl`.
    let claim_ttl = (c.options.wait + IN_PROGRESS_MARGIN).min(ttl);
    match keys.claim(&scope, &hash, claim_ttl).await {
        Err(e) => crate::error::unavailable(e).into_response(),
        Ok(Some(earlier)) if earlier.hash != hash => ApiError::new(
            ErrorCode::IdempotencyConflict,
            format!("Idempotency-Key {key:?} was used with another request body"),
        )
        .about("Idempotency-Key")
        .into_response(),
        Ok(Some(Claimed { answer: None, .. })) => ApiError::new(
            ErrorCode::IdempotencyInProgress,
            format!("Idempotency-Key {key:?}: the first request with it is still being handled; retry shortly"),
        )
        .into_response(),
        Ok(Some(Claimed {
            answer: Some(answer),
            ..
        })) => replay(&answer),
        Ok(None) => {
            let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
            if !response.status().is_success() {
                if let Err(e) = keys.release(&scope).await {
                    tracing::warn!(error = %e, "cannot release an idempotency key; it expires");
                }
                return response;
            }
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_owned();
            if streamed {
                let recorder = Recorder {
                    keys: keys.clone(),
                    scope,
                    hash,
                    ttl,
                    status: response.status().as_u16(),
                    content_type,
                    collected: Vec::new(),
                    ended: false,
                };
                let (parts, body) = response.into_parts();
                return Response::from_parts(parts, Body::from_stream(recorder.tee(body)));
            }
            let (parts, body) = response.into_parts();
            let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
                return ApiError::new(ErrorCode::Internal, "answer unreadable")
                    .into_response();
            };
            let answer = Answer {
                status: parts.status.as_u16(),
                content_type,
                body: String::from_utf8_lossy(&body).into_owned(),
            };
            let claimed = Claimed {
                hash,
                answer: Some(answer),
            };
            if let Err(e) = keys.answer(&scope, &claimed, ttl).await {
                // The work exists; a retry now would be refused as in progress until the key
                // expires, never duplicated.
                tracing::warn!(error = %e, "cannot store an idempotent answer");
            }
            Response::from_parts(parts, Body::from(body))
        }
    }
}

/// Records a streamed answer as it goes out; stores it once the stream ended, or releases the
/// key if it was cut off (the client went away) so that a retry runs.
struct Recorder {
    keys: std::sync::Arc<dyn store::Idempotency>,
    scope: String,
    hash: String,
    ttl: std::time::Duration,
    status: u16,
    content_type: String,
    collected: Vec<u8>,
    ended: bool,
}

impl Recorder {
    fn tee(
        self,
        body: Body,
    ) -> impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Send {
        use futures::StreamExt;
        futures::stream::unfold(
            (body.into_data_stream(), self),
            |(mut chunks, mut recorder)| async move {
                match chunks.next().await {
                    Some(Ok(chunk)) => {
                        recorder.collected.extend_from_slice(&chunk);
                        Some((Ok(chunk), (chunks, recorder)))
                    }
                    Some(Err(e)) => Some((Err(e), (chunks, recorder))),
                    None => {
                        recorder.ended = true;
                        drop(recorder); // stores the answer
                        None
                    }
                }
            },
        )
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let keys = self.keys.clone();
        let scope = std::mem::take(&mut self.scope);
        if self.ended {
            let claimed = Claimed {
                hash: std::mem::take(&mut self.hash),
                answer: Some(Answer {
                    status: self.status,
                    content_type: std::mem::take(&mut self.content_type),
                    body: String::from_utf8_lossy(&self.collected).into_owned(),
                }),
            };
            let ttl = self.ttl;
            tokio::spawn(async move {
                if let Err(e) = keys.answer(&scope, &claimed, ttl).await {
                    tracing::warn!(error = %e, "cannot store an idempotent answer");
                }
            });
        } else {
            tokio::spawn(async move {
                if let Err(e) = keys.release(&scope).await {
                    tracing::warn!(error = %e, "cannot release an idempotency key; it expires");
                }
            });
        }
    }
}

fn replay(answer: &Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = (status, answer.body.clone()).into_response();
    if let Ok(value) = HeaderValue::from_str(&answer.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
