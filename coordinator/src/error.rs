//! The API's error answer: a status and a message, sent as an `ErrorBody`. The leaf every
//! handler builds on.

use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::api::ErrorBody;

/// An API error: a status and a message for the caller.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    pub(crate) message: String,
    /// `Retry-After`, in seconds (a 429's).
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
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

/// A dependency (Redis, the broker) did not answer: 503 with what it said.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// A path that cannot be read (e.g. not UTF-8 once percent-decoded) is a 400 like any other.
pub(crate) fn path_rejected(rejection: PathRejection) -> ApiError {
    ApiError::new(rejection.status(), rejection.body_text())
}
