//! The body of every error answer, and the codes a program acts on.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Body of every 4xx/5xx answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for a person.
    pub error: String,
    /// What went wrong, for a program: one of a fixed list (the `ErrorCode` schema describes
    /// each). A code always comes with the same HTTP status.
    pub code: ErrorCode,
    /// The field, query parameter or header the error is about, when it is about one
    /// (`language`, `items[3].timeout_ms`, `Idempotency-Key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The setting whose limit the request went over (a 429's: e.g.
    /// `coordinator.tenant_defaults.requests_per_second`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

/// A machine-readable reason of an error answer. Stable: a code is never renamed or given
/// another status; new ones may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedBody,
    InvalidQuery,
    InvalidId,
    InvalidHeader,
    ApiKeyRequired,
    ApiKeyUnknown,
    Forbidden,
    NotFound,
    NoSuchRoute,
    CachingDisabled,
    MethodNotAllowed,
    IdempotencyConflict,
    IdempotencyInProgress,
    AlreadyEnded,
    PayloadTooLarge,
    UnsupportedMediaType,
    InvalidField,
    UnknownLanguage,
    RateLimited,
    QuotaExceeded,
    Internal,
    BrokerUnavailable,
    NotQueued,
    StoreUnavailable,
    NotKept,
    NoGenerator,
    SessionEnded,
    SessionLost,
    NoSessionHost,
    SessionRestored,
    NotAnAgentJob,
}

impl ErrorCode {
    pub const ALL: &[ErrorCode] = &[
        Self::MalformedBody,
        Self::InvalidQuery,
        Self::InvalidId,
        Self::InvalidHeader,
        Self::ApiKeyRequired,
        Self::ApiKeyUnknown,
        Self::Forbidden,
        Self::NotFound,
        Self::NoSuchRoute,
        Self::CachingDisabled,
        Self::MethodNotAllowed,
        Self::IdempotencyConflict,
        Self::IdempotencyInProgress,
        Self::AlreadyEnded,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::InvalidField,
        Self::UnknownLanguage,
        Self::RateLimited,
        Self::QuotaExceeded,
        Self::Internal,
        Self::BrokerUnavailable,
        Self::NotQueued,
        Self::StoreUnavailable,
        Self::NotKept,
        Self::NoGenerator,
        Self::SessionEnded,
        Self::SessionLost,
        Self::NoSessionHost,
        Self::SessionRestored,
        Self::NotAnAgentJob,
    ];

    /// The HTTP status every answer with this code has.
    pub fn status(self) -> u16 {
        match self {
            Self::MalformedBody | Self::InvalidQuery | Self::InvalidId | Self::InvalidHeader => 400,
            Self::ApiKeyRequired | Self::ApiKeyUnknown => 401,
            Self::Forbidden => 403,
            Self::NotFound | Self::NoSuchRoute | Self::CachingDisabled => 404,
            Self::MethodNotAllowed => 405,
            Self::IdempotencyConflict
            | Self::IdempotencyInProgress
            | Self::AlreadyEnded
            | Self::SessionEnded
            | Self::SessionLost
            | Self::NotAnAgentJob => 409,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::InvalidField | Self::UnknownLanguage => 422,
            Self::RateLimited | Self::QuotaExceeded => 429,
            Self::Internal => 500,
            Self::BrokerUnavailable
            | Self::NotQueued
            | Self::StoreUnavailable
            | Self::NotKept
            | Self::NoGenerator
            | Self::NoSessionHost
            | Self::SessionRestored => 503,
        }
    }

    /// Its name on the wire (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MalformedBody => "malformed_body",
            Self::InvalidQuery => "invalid_query",
            Self::InvalidId => "invalid_id",
            Self::InvalidHeader => "invalid_header",
            Self::ApiKeyRequired => "api_key_required",
            Self::ApiKeyUnknown => "api_key_unknown",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::NoSuchRoute => "no_such_route",
            Self::CachingDisabled => "caching_disabled",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::IdempotencyInProgress => "idempotency_in_progress",
            Self::AlreadyEnded => "already_ended",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::InvalidField => "invalid_field",
            Self::UnknownLanguage => "unknown_language",
            Self::RateLimited => "rate_limited",
            Self::QuotaExceeded => "quota_exceeded",
            Self::Internal => "internal",
            Self::BrokerUnavailable => "broker_unavailable",
            Self::NotQueued => "not_queued",
            Self::StoreUnavailable => "store_unavailable",
            Self::NotKept => "not_kept",
            Self::NoGenerator => "no_generator",
            Self::SessionEnded => "session_ended",
            Self::SessionLost => "session_lost",
            Self::NoSessionHost => "no_session_host",
            Self::SessionRestored => "session_restored",
            Self::NotAnAgentJob => "not_an_agent_job",
        }
    }

    /// What it means and what a client does about it (the OpenAPI document lists these).
    pub fn meaning(self) -> &'static str {
        match self {
            Self::MalformedBody => {
                "the body is not JSON (or NDJSON) of the request's shape; `param` names the field where one is to blame. Fix the request."
            }
            Self::InvalidQuery => "a query parameter cannot be read. Fix the request.",
            Self::InvalidId => "the path's id is not an id of this kind (`param`: `id`).",
            Self::InvalidHeader => {
                "a header's value is not allowed (`param` names it, e.g. `Idempotency-Key`)."
            }
            Self::ApiKeyRequired => {
                "API keys are configured and the request carried none (`Authorization: Bearer KEY` or `X-API-Key`)."
            }
            Self::ApiKeyUnknown => "the API key is not one this coordinator knows.",
            Self::Forbidden => {
                "the tenant may not do this (another tenant's usage, the cache of all tenants: admin tenants only)."
            }
            Self::NotFound => {
                "no such job, batch or execution for this tenant (another tenant's work is as unknown as missing work)."
            }
            Self::NoSuchRoute => "no route has this path.",
            Self::CachingDisabled => "the cache routes answer only when caching is on.",
            Self::MethodNotAllowed => "the route exists but not with this method.",
            Self::IdempotencyConflict => {
                "the `Idempotency-Key` was used with another request body: nothing was done. Use a new key for a new request."
            }
            Self::IdempotencyInProgress => {
                "the first request with this `Idempotency-Key` is still being handled: send it again shortly to get its answer."
            }
            Self::AlreadyEnded => "the job had already ended; its result stands.",
            Self::PayloadTooLarge => {
                "the body is over `coordinator.max_body_bytes` (batches: `max_batch_body_bytes`)."
            }
            Self::UnsupportedMediaType => "the body's content type is not one the route reads.",
            Self::InvalidField => {
                "a field's value is out of range or not allowed; `param` names it. Nothing was created."
            }
            Self::UnknownLanguage => {
                "the `language` is not one of `GET /v1/languages` (or not one this route can generate in)."
            }
            Self::RateLimited => {
                "over the tenant's request rate (`limit` names the setting): nothing was done; send again after `Retry-After` seconds."
            }
            Self::QuotaExceeded => {
                "over one of the tenant's quotas (`limit` names it): nothing was queued; send again after `Retry-After` seconds."
            }
            Self::Internal => "a fault of the coordinator's own; the message says which.",
            Self::BrokerUnavailable => {
                "this coordinator cannot reach RabbitMQ. Nothing was recorded or queued: the same request may be sent again at once, to this coordinator after `Retry-After` or to another."
            }
            Self::NotQueued => {
                "the broker refused the work after it was recorded: the work (named in the message) ended failed. Sending again creates new work."
            }
            Self::StoreUnavailable => {
                "Redis did not answer; the message says what it said. Send again after `Retry-After` seconds."
            }
            Self::NotKept => {
                "this coordinator runs without Redis and keeps no index, usage or batch records to answer from."
            }
            Self::NoGenerator => {
                "workers are alive but none of them can generate code (no model configured or reachable); the message says why."
            }
            Self::SessionEnded => {
                "the session has ended (deleted, idle past its timeout, past its lifetime, or its kernel died: the message says which). Open a new one."
            }
            Self::SessionLost => {
                "the worker holding the session was lost and nothing could restore it (no checkpoint, or its last one could not be taken: the message says why): its state is gone. Open a new one."
            }
            Self::NoSessionHost => {
                "no live worker can take another session now (none announced, or all at `worker.sessions.max_per_worker`). Send again after `Retry-After` seconds."
            }
            Self::SessionRestored => {
                "the worker holding the session was lost after this cell ran and before its answer came back: the session now lives on another worker with the cell's effects (the message names what did not come back); its output is lost. Do not send it again."
            }
            Self::NotAnAgentJob => {
                "the job is not an `agent` job: only agent jobs have a transcript."
            }
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_and_named_as_serde_names_it() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code), "{code} listed twice");
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::from(code.as_str())
            );
            assert!((400..600).contains(&code.status()), "{code}");
        }
        // A variant missing from ALL would not be in the document: the schema lists them all.
        let schema = serde_json::to_value(<ErrorCode as utoipa::PartialSchema>::schema()).unwrap();
        let named = schema["enum"].as_array().unwrap().len();
        assert_eq!(named, ErrorCode::ALL.len(), "{schema}");
    }
}
