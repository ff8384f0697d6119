//! Webhooks: a job's or batch's end POSTed to the tenant's `callback_url`, signed, retried.
//!
//! A `callback_url` is checked when the work is submitted: `http` or `https`, no user info, a
//! `host:port` that one of `coordinator.webhook_allow`'s patterns matches, a host whose every
//! address the egress guard allows (`egress`: no internal address unless
//! `coordinator.egress_allow_cidrs` has it), and the tenant must have a `webhook_secret`.
//! Redirects are never followed, and the URL is checked again at every attempt (the operator
//! may have narrowed the list since, the name may resolve elsewhere now): the pattern before
//! it, the addresses as the client connects, to the address it checked.
//!
//! Delivery: the script that ends a job makes its webhooks due (`store::webhooks`); every
//! coordinator takes due ones with a lease and POSTs
//! `{"event": "job.finished", "job": <result>}` or `{"event": "batch.finished", "batch": <view>}`
//! with `Codegen-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. A 2xx
//! answer delivers it; anything else is retried with exponential backoff until
//! `coordinator.webhook_retry_for` after the end. Every attempt is kept and shown on the
//! resource (`webhook.attempts`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use hmac::{Hmac, Mac};
use proto::TaskId;
use proto::api::{Webhook, WebhookAttempt};
use serde_json::json;
use store::webhooks::{AttemptOutcome, HookKind};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::{Coordinator, now_ms};

/// How often a coordinator looks for due webhooks when there were none.
const POLL: Duration = Duration::from_millis(250);
/// Webhooks taken at once, and delivered at once.
const CLAIM: usize = 16;
/// Backoff between attempts.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The signature header: `t=<unix seconds>,v1=<hex>`.
pub(crate) const SIGNATURE_HEADER: &str = "codegen-signature";

/// HMAC-SHA256 of `"<t>.<body>"` with `secret`, as hex.
pub(crate) fn sign(secret: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl Coordinator {
    /// The secret `tenant`'s webhooks are signed with.
    fn webhook_secret(&self, tenant: Option<&str>) -> Option<&str> {
        match tenant {
            Some(t) => self.options.tenants.get(t)?.webhook_secret.as_deref(),
            None => self.options.tenant_defaults.webhook_secret.as_deref(),
        }
        .filter(|s| !s.is_empty())
    }

    /// Why `url` may not be called, if it may not.
    fn refuse_target(&self, url: &str) -> Option<String> {
        let parsed = match url::Url::parse(url) {
            Ok(parsed) => parsed,
            Err(e) => return Some(format!("not a URL: {e}")),
        };
        if !matches!(parsed.scheme(), "http" | "https") {
            return Some(format!(
                "the scheme must be http or https, not {}",
                parsed.scheme()
            ));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Some("user info is not allowed in a callback URL".into());
        }
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
            return Some("the URL has no host".into());
        };
        let target = format!("{}:{port}", host.to_ascii_lowercase());
        let allowed = self
            .options
            .webhook_allow
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .any(|pattern| {
                wildmatch::WildMatch::new(&pattern.to_ascii_lowercase()).matches(&target)
            });
        (!allowed).then(|| {
            if self.options.webhook_allow.trim().is_empty() {
                "webhooks are not enabled on this cluster (coordinator.webhook_allow is empty)"
                    .into()
            } else {
                format!("{target} is not a target coordinator.webhook_allow allows")
            }
        })
    }

    /// Checks a submitted `callback_url` for `tenant`, its host resolved by the egress guard;
    /// the 422 names `field`.
    pub(crate) async fn check_callback(
        &self,
        field: &str,
        tenant: Option<&str>,
        url: &str,
    ) -> Result<(), ApiError> {
        if self.webhooks().is_none() {
            return Err(ApiError::invalid(
                field,
                "this coordinator delivers no webhooks (it runs without Redis)",
            ));
        }
        if let Some(why) = self.refuse_target(url) {
            return Err(ApiError::invalid(field, why));
        }
        if let Ok(parsed) = url::Url::parse(url)
            && let Err(refusal) = self.egress.check_url(&parsed).await
        {
            return Err(ApiError::invalid(field, refusal));
        }
        if self.webhook_secret(tenant).is_none() {
            let setting = match tenant {
                Some(t) => format!("coordinator.tenants.{t}.webhook_secret"),
                None => "coordinator.tenant_defaults.webhook_secret".into(),
            };
            return Err(ApiError::invalid(
                field,
                format!("no key to sign webhooks with is configured ({setting})"),
            ));
        }
        Ok(())
    }

    /// The webhook of a job or batch, for its view.
    pub(crate) async fn webhook_view(&self, kind: HookKind, id: TaskId) -> Option<Webhook> {
        let (store, _) = self.webhooks()?;
        match store.hook(kind, id).await {
            Ok(hook) => hook.map(|h| h.view),
            Err(e) => {
                tracing::debug!(%id, error = %e, "cannot read a webhook");
                None
            }
        }
    }

    /// One attempt of the webhook of `kind` `id`, recorded.
    async fn deliver(&self, kind: HookKind, id: TaskId) {
        let Some((store, client)) = self.webhooks() else {
            return;
        };
        let hook = match store.hook(kind, id).await {
            Ok(Some(hook)) => hook,
            Ok(None) => {
                let _ = store.drop_due(kind, id).await;
                return;
            }
            Err(e) => {
                tracing::debug!(%id, error = %e, "cannot read a due webhook; its lease will run out");
                return;
            }
        };
        let body = match self.webhook_body(kind, id).await {
            Ok(Some(body)) => body,
            Ok(None) => {
                let _ = store.drop_due(kind, id).await;
                return;
            }
            Err(e) => {
                tracing::debug!(%id, error = %e, "cannot read what a webhook reports; its lease will run out");
                return;
            }
        };
        let started = Instant::now();
        let at_ms = now_ms();
        let mut attempt = WebhookAttempt {
            at_ms,
            status: None,
            error: None,
            duration_ms: 0,
        };
        let secret = self.webhook_secret(hook.tenant.as_deref());
        // A name is resolved and checked by the client's resolver as it connects (the address
        // checked is the one connected to); an address in the URL is checked here.
        let refused = match self.refuse_target(&hook.view.url) {
            Some(why) => Some(why),
            None => match url::Url::parse(&hook.view.url) {
                Ok(parsed)
                    if matches!(parsed.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))) =>
                {
                    self.egress
                        .check_url(&parsed)
                        .await
                        .err()
                        .map(|r| r.to_string())
                }
                _ => None,
            },
        };
        match (refused, secret) {
            (Some(why), _) => attempt.error = Some(why),
            (None, None) => {
                attempt.error = Some("no key to sign webhooks with is configured any more".into());
            }
            (None, Some(secret)) => {
                let timestamp = at_ms / 1000;
                let signature = format!("t={timestamp},v1={}", sign(secret, timestamp, &body));
                let sent = client
                    .post(&hook.view.url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header("codegen-event", format!("{}.finished", kind.as_str()))
                    .header(
                        "codegen-delivery",
                        format!("{}:{id}:{}", kind.as_str(), hook.view.attempts.len() + 1),
                    )
                    .header(SIGNATURE_HEADER, signature)
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(response) => attempt.status = Some(response.status().as_u16()),
                    Err(e) => attempt.error = Some(error_chain(&e)),
                }
            }
        }
        attempt.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let delivered = attempt
            .status
            .is_some_and(|s| StatusCode::from_u16(s).is_ok_and(|s| s.is_success()));
        let since = hook.since_ms.unwrap_or(at_ms);
        let retry_for =
            u64::try_from(self.options.webhook_retry_for.as_millis()).unwrap_or(u64::MAX);
        let outcome = if delivered {
            AttemptOutcome::Delivered
        } else {
            let wait = ExponentialBuilder::default()
                .with_min_delay(RETRY_MIN)
                .with_max_delay(RETRY_MAX)
                .with_jitter()
                .without_max_times()
                .build()
                .nth(hook.view.attempts.len())
                .unwrap_or(RETRY_MAX);
            let next = now_ms() + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            if next.saturating_sub(since) <= retry_for {
                AttemptOutcome::RetryAt(next)
            } else {
                AttemptOutcome::Failed
            }
        };
        tracing::info!(%id, kind = kind.as_str(), status = ?attempt.status, error = ?attempt.error, ?outcome, "webhook attempt");
        if let Err(e) = store.record_attempt(kind, id, &attempt, outcome).await {
            tracing::warn!(%id, error = %e, "cannot record a webhook attempt; it will be made again");
        }
    }

    /// What the webhook of `kind` `id` reports; `None` once that has expired.
    async fn webhook_body(
        &self,
        kind: HookKind,
        id: TaskId,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        let body = match kind {
            HookKind::Job => match self.stores.jobs.result(id).await? {
                Some(result) => json!({"event": "job.finished", "job": result}),
                None => return Ok(None),
            },
            HookKind::Batch => match self.stores.jobs.batch(id).await? {
                Some(batch) => match crate::batches::view(self, &batch).await {
                    Ok(view) => json!({"event": "batch.finished", "batch": view}),
                    Err(e) => {
                        return Err(store::Error::Unavailable(e.message().to_owned()));
                    }
                },
                None => return Ok(None),
            },
            HookKind::ExecutionBatch => match self.webhooks() {
                Some((store, _)) => match store.execution_batch(id).await? {
                    Some(record) => {
                        let view = crate::executions::execution_batch_view(self, &record).await?;
                        json!({"event": "execution_batch.finished", "batch": view})
                    }
                    None => return Ok(None),
                },
                None => return Ok(None),
            },
        };
        Ok(Some(body.to_string().into_bytes()))
    }
}

/// Delivers due webhooks; every coordinator runs one, each webhook taken with a lease.
pub(crate) struct Deliverer {
    coordinator: Coordinator,
    store: Arc<dyn store::Webhooks>,
    /// Past it a webhook is due again: longer than one attempt can take.
    lease: Duration,
}

impl Deliverer {
    /// `None` without a webhook store (`stores.webhooks`).
    pub(crate) fn build(coordinator: &Coordinator) -> Option<Self> {
        Some(Self {
            store: coordinator.stores.webhooks.clone()?,
            lease: coordinator.options.webhook_timeout + Duration::from_secs(5),
            coordinator: coordinator.clone(),
        })
    }

    /// Until `cancel` fires.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        loop {
            let due = match self.store.claim_due(self.lease, CLAIM).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot look for due webhooks now");
                    Vec::new()
                }
            };
            if due.is_empty() {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(POLL) => continue,
                }
            }
            futures::stream::iter(due)
                .for_each_concurrent(CLAIM, |(kind, id)| self.coordinator.deliver(kind, id))
                .await;
            if cancel.is_cancelled() {
                return;
            }
        }
    }
}

/// An error with its causes (reqwest's own message hides the connection's).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use broker::MemoryBroker;

    use super::*;
    use crate::testing::{Names, call};

    /// The guard at both ends of a webhook: a callback host that resolves to an internal
    /// address is refused at submission (422 naming the field and the address), and one that
    /// resolved to a public address then but to an internal one when it is called (rebinding)
    /// gets a failed attempt on record, nothing sent, a refusal counted.
    #[tokio::test]
    async fn a_callback_to_an_internal_address_is_refused_at_submission_and_at_delivery() {
        let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = received.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { "ok" }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let names = Arc::new(Names::default());
        names.set("metadata.test", &["169.254.169.254"]);
        names.set("hooks.test", &["93.184.215.14"]);
        let options = crate::Options {
            webhook_allow: "*:*".into(),
            tenant_defaults: crate::TenantOptions {
                webhook_secret: Some("secret".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let registry = prometheus::Registry::new();
        let c = Coordinator::build(
            options,
            Arc::new(MemoryBroker::new(5)),
            store::Stores::memory(store::MemoryStore::new(), store::MemoryJobs::new()),
            &registry,
        )
        .unwrap()
        .with_lookup(names.clone())
        .unwrap();

        let (status, answer) = call(
            &c,
            "POST",
            "/v1/jobs",
            r#"{"instruction": "x", "callback_url": "http://metadata.test/latest/meta-data"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.starts_with("callback_url: ") && error.contains("169.254.169.254"),
            "{error}"
        );

        let url = format!("http://hooks.test:{port}/job");
        let (status, answer) = call(
            &c,
            "POST",
            "/v1/jobs",
            &serde_json::json!({"instruction": "x", "callback_url": url}).to_string(),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        let id: TaskId = answer["job_id"].as_str().unwrap().parse().unwrap();
        let (status, answer) = call(&c, "DELETE", &format!("/v1/jobs/{id}"), "").await;
        assert!(status.is_success(), "{answer}");
        // Now the name answers the receiver's loopback address, which is not allowed.
        names.set("hooks.test", &["127.0.0.1"]);
        c.deliver(HookKind::Job, id).await;
        let view = c.webhook_view(HookKind::Job, id).await.unwrap();
        let attempt = &view.attempts[0];
        assert_eq!(attempt.status, None, "{view:?}");
        assert!(
            attempt
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("loopback"),
            "{view:?}"
        );
        assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(
            c.metrics
                .egress_refused
                .with_label_values(&["link_local"])
                .get()
                + c.metrics
                    .egress_refused
                    .with_label_values(&["loopback"])
                    .get(),
            2
        );
    }

    #[test]
    fn a_signature_covers_the_timestamp_and_the_body() {
        let a = sign("k", 1, b"{}");
        assert_eq!(a.len(), 64);
        assert_ne!(a, sign("k", 2, b"{}"));
        assert_ne!(a, sign("k", 1, b"{ }"));
        assert_ne!(a, sign("other", 1, b"{}"));
    }
}
