//! The API's error answer: a status and a message, sent as an `ErrorBody`. The leaf every
//! handler builds on.

use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::api::{ErrorBody, ErrorCode};

/// An API error: a status and a message for the caller.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    pub(crate) message: String,
    /// `Retry-After`, in seconds (a 429's).
    retry_after: Option<u64>,
    code: Option<ErrorCode>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
            code: None,
        }
    }

    /// The same error, answered with `Retry-After: seconds`.
    pub(crate) fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The same error, its message prefixed (e.g. with the line of a batch it is about).
    pub(crate) fn prefixed(self, prefix: &str) -> Self {
        Self {
            status: self.status,
            message: format!("{prefix}{}", self.message),
            retry_after: self.retry_after,
            code: self.code,
        }
    }

    pub(crate) fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{field}: {message}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(ErrorBody {
                error: self.message,
                code: self.code,
            }),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// How long a client is asked to wait before sending again a request refused because the broker
/// is unreachable from here: the broker's probes would have seen it come back by then (or the
/// proxy has another coordinator).
const BROKER_RETRY_AFTER_S: u64 = 1;

/// 503 `broker_unavailable` while the broker is unreachable from this coordinator (its
/// `/readyz` says the same), before anything of the request was recorded: refused at once
/// rather than after a publish timeout, and safe to send again anywhere.
pub(crate) fn broker_unavailable(reason: &str) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not accepted: the broker is unreachable from this coordinator ({reason})"),
    )
    .with_retry_after(BROKER_RETRY_AFTER_S);
    e.code = Some(ErrorCode::BrokerUnavailable);
    e
}

/// A dependency (Redis, the broker) did not answer: 503 with what it said.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// A path that cannot be read (e.g. not UTF-8 once percent-decoded) is a 400 like any other.
pub(crate) fn path_rejected(rejection: PathRejection) -> ApiError {
    ApiError::new(rejection.status(), rejection.body_text())
}
