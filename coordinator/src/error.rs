//! The API's error answer: a code (which fixes the status), a message, and what it is about,
//! sent as an `ErrorBody`. The leaf every handler builds on; `Retry-After` on every 429 and
//! 503 is decided here.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::api::{ErrorBody, ErrorCode};

/// An API error: a code and a message for the caller.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: ErrorCode,
    pub(crate) message: String,
    param: Option<String>,
    limit: Option<String>,
    /// `Retry-After`, in seconds; 429s and 503s without one get [`default_retry_after`].
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            param: None,
            limit: None,
            retry_after: None,
        }
    }

    /// 422 `invalid_field` about `field` (`unknown_language` when the field is a language).
    pub(crate) fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        let code = if field == "language" {
            ErrorCode::UnknownLanguage
        } else {
            ErrorCode::InvalidField
        };
        Self::new(code, format!("{field}: {message}")).about(field)
    }

    /// The same error, about `param` (a field, a query parameter, a header).
    pub(crate) fn about(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The same error, naming the setting whose limit was reached.
    pub(crate) fn over(mut self, setting: impl Into<String>) -> Self {
        self.limit = Some(setting.into());
        self
    }

    /// The same error, answered with `Retry-After: seconds`.
    pub(crate) fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    /// What the error is about (a field, a query parameter, a header).
    #[cfg(test)]
    pub(crate) fn field(&self) -> Option<&str> {
        self.param.as_deref()
    }

    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The same error, its message prefixed (e.g. with the line of a batch it is about).
    pub(crate) fn prefixed(mut self, prefix: &str) -> Self {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    /// The same error about a field of the element at `path` (`items[3]`): its message and
    /// its `param` (`items[3].memory_mb`) both name the element.
    pub(crate) fn within(mut self, path: &str) -> Self {
        self.param = self.param.map(|param| format!("{path}.{param}"));
        self.prefixed(&format!("{path}."))
    }

    /// The body of this answer (a batch line's error is one of these too).
    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.message.clone(),
            code: self.code,
            param: self.param.clone(),
            limit: self.limit.clone(),
        }
    }
}

/// How long a client is asked to wait before sending again a request refused with a 429 or
/// 503 that names no wait of its own: a dependency's probes see it come back within about a
/// second (or the proxy has another coordinator); a configuration-bound refusal
/// (`not_kept`, `no_generator`) is not worth a tight loop.
fn default_retry_after(code: ErrorCode) -> Option<u64> {
    match code {
        ErrorCode::NotKept | ErrorCode::NoGenerator => Some(30),
        code if matches!(code.status(), 429 | 503) => Some(1),
        _ => None,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.retry_after.or_else(|| default_retry_after(self.code));
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// 503 `broker_unavailable` while the broker is unreachable from this coordinator (its
/// `/readyz` says the same), before anything of the request was recorded: refused at once
/// rather than after a publish timeout, and safe to send again anywhere.
pub(crate) fn broker_unavailable(reason: &str) -> ApiError {
    ApiError::new(
        ErrorCode::BrokerUnavailable,
        format!("not accepted: the broker is unreachable from this coordinator ({reason})"),
    )
}

/// Redis did not answer: 503 `store_unavailable` with what it said.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::StoreUnavailable, e.to_string())
}

/// A path that cannot be read (e.g. not UTF-8 once percent-decoded) is a 400 like any other.
pub(crate) fn path_rejected(rejection: PathRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidId, rejection.body_text()).about("id")
}

/// A query string that does not read as the route's parameters.
pub(crate) fn query_rejected(rejection: QueryRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidQuery, rejection.body_text())
}

/// A body that could not be read at all: too large, or of a content type the route does not
/// take.
pub(crate) fn body_rejected(status: StatusCode, text: String) -> ApiError {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        _ => ErrorCode::MalformedBody,
    };
    ApiError::new(code, text)
}

/// `id: not a job id: …`: 400 `invalid_id`.
pub(crate) fn invalid_id(kind: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::InvalidId, format!("id: not a {kind} id: {e}")).about("id")
}

/// 404 `not_found`.
pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::NotFound, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_429_and_503_asks_for_a_wait_and_nothing_else_does() {
        for &code in ErrorCode::ALL {
            let response = ApiError::new(code, "x").into_response();
            assert_eq!(response.status().as_u16(), code.status(), "{code}");
            let waits = response.headers().contains_key(header::RETRY_AFTER);
            assert_eq!(waits, matches!(code.status(), 429 | 503), "{code}");
        }
        let told = ApiError::new(ErrorCode::QuotaExceeded, "x")
            .with_retry_after(0)
            .into_response();
        assert_eq!(told.headers()[header::RETRY_AFTER], "1");
    }
}
