//! What the HTTP providers share: classifying failures and reading `Retry-After`.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::CallError;

/// What both HTTP providers resolve the same way: the endpoint (configured base URL, else the
/// environment's, else the public one, joined with `path`), the API key (configured, else the
/// environment's) and a client with the per-call timeout.
pub(crate) struct Connection {
    pub http: reqwest::Client,
    pub endpoint: String,
    /// What [`probe`] asks: the API's model list, cheap and served by every compatible server.
    pub probe_url: String,
    /// Where a server may report how many calls it runs at once: llama.cpp's `/props`, at the
    /// server's root (the base URL without its `/v1`).
    pub props_url: String,
    pub api_key: Option<String>,
}

pub(crate) fn connection(
    options: &crate::Options,
    base_env: &str,
    public_base: &str,
    key_env: &str,
    path: &str,
    probe_path: &str,
) -> Result<Connection, crate::Error> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|s| !s.is_empty());
    let base = Some(options.base_url.clone())
        .filter(|s| !s.is_empty())
        .or_else(|| from_env(base_env))
        .unwrap_or_else(|| public_base.to_owned());
    let api_key = options
        .api_key
        .clone()
        .or_else(|| std::env::var(key_env).ok())
        .filter(|k| !k.is_empty());
    if base == public_base && api_key.is_none() {
        return Err(crate::Error::NotConfigured(format!(
            "no model.base_url (or {base_env}) and no API key ({key_env}): set model.base_url \
             to your model server, or an API key for {public_base}"
        )));
    }
    let http = reqwest::Client::builder()
        .timeout(options.timeout)
        .build()
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    let base = base.trim_end_matches('/');
    Ok(Connection {
        http,
        endpoint: format!("{base}{path}"),
        probe_url: format!("{base}{probe_path}"),
        props_url: format!("{}/props", base.trim_end_matches("/v1")),
        api_key,
    })
}

/// How long a reachability probe waits for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the server answers at all: any HTTP answer below 500 (even 401 or 404) means it is
/// up; a refused connection, a timeout or a 5xx means it is not.
pub(crate) async fn probe(
    call: reqwest::RequestBuilder,
    url: &str,
) -> Result<(), crate::ProbeFailure> {
    match call.timeout(PROBE_TIMEOUT).send().await {
        Ok(response) if response.status().is_server_error() => Err(crate::ProbeFailure {
            message: format!("{url} answers HTTP {}", response.status().as_u16()),
            unanswered: false,
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(crate::ProbeFailure {
            unanswered: e.is_timeout(),
            message: format!("{url}: {}", transport(e)),
        }),
    }
}

/// The calls the server runs at once, if it says: llama.cpp's server answers `/props` with
/// `total_slots`. Anything else (another server, an error, no answer within the probe's
/// timeout) is no report.
pub(crate) async fn slots(call: reqwest::RequestBuilder) -> Option<u32> {
    let response = call.timeout(PROBE_TIMEOUT).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let props: serde_json::Value = response.json().await.ok()?;
    props["total_slots"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The server's requested wait: `retry-after-ms` (OpenAI) or `Retry-After` in seconds.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = read("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    read("retry-after").map(Duration::from_secs_f64)
}

/// Maps a non-success answer to the retry decision.
pub(crate) fn classify(status: StatusCode, headers: &HeaderMap, body: &str) -> CallError {
    let message = error_message(body).unwrap_or_else(|| truncate(body, 500));
    let lower = body.to_ascii_lowercase();
    let spend = lower.contains("insufficient_quota")
        || lower.contains("billing")
        || lower.contains("credit balance")
        || status == StatusCode::PAYMENT_REQUIRED;
    if spend {
        return CallError::SpendLimit(format!("HTTP {}: {message}", status.as_u16()));
    }
    if matches!(status.as_u16(), 429 | 529) {
        return CallError::Throttled {
            message: format!("HTTP {}: {message}", status.as_u16()),
            retry_after: retry_after(headers),
        };
    }
    if status.is_server_error() && !matches!(status.as_u16(), 502..=504) {
        return CallError::ServerError {
            status: status.as_u16(),
            message: format!("HTTP {}: {message}", status.as_u16()),
            retry_after: retry_after(headers),
        };
    }
    let retryable = matches!(status.as_u16(), 408 | 409) || status.is_server_error();
    if retryable {
        CallError::Retryable {
            message: format!("HTTP {}: {message}", status.as_u16()),
            retry_after: retry_after(headers),
        }
    } else {
        CallError::Rejected {
            status: status.as_u16(),
            message,
        }
    }
}

/// Connection failures and timeouts are worth retrying; anything else reqwest reports is not.
pub(crate) fn transport(error: reqwest::Error) -> CallError {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "transport error"
    };
    CallError::Retryable {
        message: format!("{kind}: {error}"),
        retry_after: None,
    }
}

/// `{"error": {"message": …}}` (both APIs) or `{"error": "…"}`.
fn error_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = value.get("error")?;
    error
        .get("message")
        .and_then(|m| m.as_str())
        .or_else(|| error.as_str())
        .map(str::to_owned)
}

pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn status_classes() {
        let none = HeaderMap::new();
        for status in [408, 409, 502, 503, 504] {
            let e = classify(StatusCode::from_u16(status).unwrap(), &none, "{}");
            assert!(matches!(e, CallError::Retryable { .. }), "{status}: {e:?}");
        }
        for status in [500, 501] {
            let e = classify(StatusCode::from_u16(status).unwrap(), &none, "{}");
            assert!(
                matches!(e, CallError::ServerError { .. }),
                "{status}: {e:?}"
            );
        }
        for status in [429, 529] {
            let e = classify(StatusCode::from_u16(status).unwrap(), &none, "{}");
            assert!(matches!(e, CallError::Throttled { .. }), "{status}: {e:?}");
        }
        for status in [400, 401, 403, 404, 422] {
            let e = classify(StatusCode::from_u16(status).unwrap(), &none, "{}");
            assert!(matches!(e, CallError::Rejected { .. }), "{status}: {e:?}");
        }
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let e = classify(StatusCode::TOO_MANY_REQUESTS, &none, quota);
        assert!(matches!(e, CallError::SpendLimit(_)), "{e:?}");
        let credit = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}"#;
        let e = classify(StatusCode::BAD_REQUEST, &none, credit);
        assert!(matches!(e, CallError::SpendLimit(_)), "{e:?}");
    }

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        let mut bad = HeaderMap::new();
        bad.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&bad), None);
    }
}
