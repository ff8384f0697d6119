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
    /// Where a server may report its queue: vLLM's Prometheus `/metrics`, at its root.
    pub metrics_url: String,
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
        metrics_url: format!("{}/metrics", base.trim_end_matches("/v1")),
        api_key,
    })
}

/// How long a reachability probe waits for an answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// What the server runs and queues now, if it says: vLLM's `/metrics` has
/// `vllm:num_requests_running` and `vllm:num_requests_waiting` (one series per model it
/// serves, added up), llama.cpp's server (started with `--metrics`)
/// `llamacpp:requests_processing` and `llamacpp:requests_deferred`. Anything else is no
/// report.
pub(crate) async fn queue(call: reqwest::RequestBuilder) -> crate::adaptive::QueueReport {
    use crate::adaptive::QueueReport;
    let Ok(response) = call.timeout(PROBE_TIMEOUT).send().await else {
        return QueueReport::Unanswered;
    };
    let status = response.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return QueueReport::Unanswered;
    }
    if !status.is_success() {
        return QueueReport::None;
    }
    match response.text().await {
        Ok(text) => server_queue(&text).map_or(QueueReport::None, QueueReport::Queue),
        Err(_) => QueueReport::Unanswered,
    }
}

/// [`queue`]'s reading of a Prometheus text exposition.
pub(crate) fn server_queue(text: &str) -> Option<crate::adaptive::ServerQueue> {
    [
        ("vllm:num_requests_running", "vllm:num_requests_waiting"),
        ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    ]
    .into_iter()
    .find_map(|(running, waiting)| {
        Some(crate::adaptive::ServerQueue {
            running: gauge_total(text, running)?,
            waiting: gauge_total(text, waiting)?,
        })
    })
}

/// The sum of every series of metric `name` in a Prometheus text exposition (`None`: none).
///
/// Read here rather than by a crate: the Rust parsers of this format either refuse the `:`
/// that vLLM's and llama.cpp's names carry (prometheus-parse) or bring second copies of
/// winnow and strum (prom_text_format_parser), and a sample line is only
/// `name[{labels}] value [timestamp]`, labels quoted with backslash escapes.
fn gauge_total(text: &str, name: &str) -> Option<u32> {
    let mut found = false;
    let mut sum = 0.0f64;
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix(name) else {
            continue;
        };
        let rest = match rest.chars().next() {
            Some('{') => skip_labels(rest)?,
            Some(c) if c.is_whitespace() => rest,
            // Another metric whose name begins with this one.
            _ => continue,
        };
        let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
        found = true;
        if value.is_finite() && value > 0.0 {
            sum += value;
        }
    }
    found.then(|| u32::try_from(sum.round() as u64).unwrap_or(u32::MAX))
}

/// What follows the label set at the start of `s` (`{...}`), quotes and escapes honoured.
fn skip_labels(s: &str) -> Option<&str> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(&s[i + 1..]),
            _ => {}
        }
    }
    None
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
    fn a_servers_metrics_say_what_it_runs_and_queues() {
        let vllm = r#"# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
vllm:num_requests_running{model_name="other"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.93
"#;
        assert_eq!(
            server_queue(vllm),
            Some(crate::adaptive::ServerQueue {
                running: 5,
                waiting: 3
            })
        );
        let llama = "# HELP llamacpp:requests_processing Number of requests processing.\n\
                     # TYPE llamacpp:requests_processing gauge\n\
                     llamacpp:requests_processing 1\n\
                     # TYPE llamacpp:requests_deferred gauge\n\
                     llamacpp:requests_deferred 4\n";
        assert_eq!(
            server_queue(llama),
            Some(crate::adaptive::ServerQueue {
                running: 1,
                waiting: 4
            })
        );
        // Label values may hold braces, quotes and spaces; a longer name is another metric.
        let tricky = "vllm:num_requests_running{model_name=\"a} \\\"b\\\" c\"} 2\n\
                      vllm:num_requests_running_total 99\n\
                      vllm:num_requests_waiting 1e0 1700000000000\n";
        assert_eq!(
            server_queue(tricky),
            Some(crate::adaptive::ServerQueue {
                running: 2,
                waiting: 1
            })
        );
        // Another server's metrics (or none of these series): no report.
        let other = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n";
        assert_eq!(server_queue(other), None);
        assert_eq!(server_queue("not metrics at all {"), None);
    }

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
