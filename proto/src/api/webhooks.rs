//! Webhooks as the API shows them: where a resource's end is POSTed, and every attempt.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The webhook of a job or batch (`callback_url`), as delivered so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Webhook {
    pub url: String,
    pub state: WebhookState,
    /// Every delivery attempt, oldest first.
    pub attempts: Vec<WebhookAttempt>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookState {
    /// The resource has not ended yet.
    Waiting,
    /// Ended; being delivered (or waiting for its next attempt).
    Pending,
    /// A 2xx answer came back.
    Delivered,
    /// No attempt got a 2xx within `coordinator.webhook_retry_for`.
    Failed,
}

/// One POST of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookAttempt {
    /// When it was sent, in milliseconds since the epoch.
    pub at_ms: u64,
    /// The HTTP status answered; absent when none came (see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub status: Option<u16>,
    /// Why no status came (connection refused, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    pub duration_ms: u64,
}
