//! `"mode": "agent"` submissions: the agent block and files checked against the limits, into
//! the [`AgentRequest`] stored with the job.

use std::collections::BTreeMap;

use proto::Language;
use proto::agent::{AgentLimits, AgentRequest};
use proto::api::sessions::SESSION_LANGUAGES;
use proto::job::{JobSubmission, Mode};

use crate::error::ApiError;

/// Most files a job gives its agent.
pub(crate) const MAX_FILES: usize = 100;
/// Most model steps a run may ask for.
pub const MAX_STEPS: u32 = 500;

/// The agent request of `submission` (`None`: not an agent job, which must not carry the
/// agent's fields).
pub(crate) fn agent_request(
    options: &crate::Options,
    submission: &JobSubmission,
    language: Language,
) -> Result<Option<AgentRequest>, ApiError> {
    if submission.mode != Some(Mode::Agent) {
        for (field, given) in [
            ("agent", submission.agent.is_some()),
            ("files", submission.files.is_some()),
        ] {
            if given {
                return Err(ApiError::invalid(
                    field,
                    "only an `agent` job takes it (`mode`)",
                ));
            }
        }
        return Ok(None);
    }
    for (field, given) in [
        ("code", submission.code.is_some()),
        ("error", submission.error.is_some()),
        ("goals", submission.goals.is_some()),
        ("candidates", submission.candidates.is_some()),
        ("max_iterations", submission.max_iterations.is_some()),
    ] {
        if given {
            return Err(ApiError::invalid(
                field,
                "an `agent` job does not take it: the agent decides its own steps (see `agent`)",
            ));
        }
    }
    if !SESSION_LANGUAGES.contains(&language) {
        return Err(ApiError::invalid(
            "language",
            format!(
                "an agent works in a session, offered in {}, not {language}",
                SESSION_LANGUAGES
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let settings = submission.agent.clone().unwrap_or_default();
    let defaults = AgentLimits::default();
    let ranged = |field: &str, value: Option<u64>, default: u64, min: u64, max: u64| {
        let value = value.unwrap_or(default);
        if (min..=max).contains(&value) {
            Ok(value)
        } else {
            Err(ApiError::invalid(
                &format!("agent.{field}"),
                format!("must be between {min} and {max}"),
            ))
        }
    };
    let small = |v: Option<u32>| v.map(u64::from);
    let limits = AgentLimits {
        max_steps: ranged(
            "max_steps",
            small(settings.max_steps),
            defaults.max_steps.into(),
            1,
            MAX_STEPS.into(),
        )? as u32,
        max_seconds: ranged(
            "max_seconds",
            settings.max_seconds,
            defaults.max_seconds.min(options.agent_max_seconds),
            1,
            options.agent_max_seconds,
        )?,
        max_cpu_ms: ranged(
            "max_cpu_ms",
            settings.max_cpu_ms,
            defaults.max_cpu_ms,
            1,
            i64::MAX as u64,
        )?,
        stuck_repeats: ranged(
            "stuck_repeats",
            small(settings.stuck_repeats),
            defaults.stuck_repeats.into(),
            2,
            100,
        )? as u32,
        stuck_errors: ranged(
            "stuck_errors",
            small(settings.stuck_errors),
            defaults.stuck_errors.into(),
            2,
            100,
        )? as u32,
        max_observation_chars: ranged(
            "max_observation_chars",
            small(settings.max_observation_chars),
            defaults.max_observation_chars.into(),
            200,
            1_000_000,
        )? as u32,
        max_malformed: defaults.max_malformed,
    };
    if let Some(t) = settings.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(ApiError::invalid(
            "agent.temperature",
            "must be between 0 and 2",
        ));
    }
    // The document's integers are int64s: a larger seed would be kept and forwarded as a
    // number the model's API may not read.
    if settings.seed.is_some_and(|seed| seed > i64::MAX as u64) {
        return Err(ApiError::invalid(
            "agent.seed",
            "must be between 0 and 9223372036854775807",
        ));
    }
    let files = submission.files.clone().unwrap_or_default();
    check_files(options, &files)?;
    Ok(Some(AgentRequest {
        limits,
        seed: settings.seed,
        temperature: settings.temperature,
        files,
        memory_mb: options.sessions.default_memory_mb,
    }))
}

fn check_files(options: &crate::Options, files: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if files.len() > MAX_FILES {
        return Err(ApiError::invalid(
            "files",
            format!("at most {MAX_FILES} files"),
        ));
    }
    let total: usize = files.values().map(String::len).sum();
    if total > options.max_code_bytes {
        return Err(ApiError::invalid(
            "files",
            format!(
                "{total} bytes in all, over the limit of {} bytes (coordinator.max_code_bytes)",
                options.max_code_bytes
            ),
        ));
    }
    for path in files.keys() {
        let bad = path.is_empty()
            || path.starts_with('/')
            || path.contains('\0')
            || path.contains('\\')
            || path.split('/').any(|p| p == ".." || p.is_empty());
        if bad {
            return Err(ApiError::invalid(
                "files",
                format!(
                    "{path:?} is not a relative path inside the working directory (no `..`, no leading `/`)"
                ),
            ));
        }
    }
    Ok(())
}

/// 503 `no_session_host` while no live worker takes sessions: an agent's run needs one (its
/// session is held where its loop runs), and a job nobody can run must not wait in the queue.
pub(crate) async fn refuse_without_session_hosts(c: &crate::Coordinator) -> Result<(), ApiError> {
    let hosts = c
        .sessions()?
        .hosts()
        .await
        .map_err(crate::error::unavailable)?;
    if hosts.iter().any(|h| h.sessions < h.capacity) {
        return Ok(());
    }
    Err(ApiError::new(
        proto::api::ErrorCode::NoSessionHost,
        "an agent job runs on a session, and no live worker can take another (none announced, or all at worker.sessions.max_per_worker)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission(json: serde_json::Value) -> JobSubmission {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_agent_job_is_bounded_and_named_by_field() {
        let options = crate::Options::default();
        let ok = agent_request(
            &options,
            &submission(serde_json::json!({"instruction": "x", "mode": "agent",
                "files": {"src/a.py": "1"}, "agent": {"max_steps": 10, "seed": 7}})),
            Language::Python,
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.limits.max_steps, 10);
        assert_eq!(ok.seed, Some(7));
        assert_eq!(ok.files["src/a.py"], "1");
        let refused = |json: serde_json::Value, language: Language| {
            agent_request(&options, &submission(json), language).unwrap_err()
        };
        let e = refused(
            serde_json::json!({"instruction": "x", "mode": "agent", "agent": {"max_steps": 0}}),
            Language::Python,
        );
        assert_eq!(e.field(), Some("agent.max_steps"));
        let e = refused(
            serde_json::json!({"instruction": "x", "mode": "agent", "files": {"src/a.py": "1"},
                "agent": {"seed": 9_223_372_036_854_775_808u64}}),
            Language::Python,
        );
        assert_eq!(e.field(), Some("agent.seed"));
        let e = refused(
            serde_json::json!({"instruction": "x", "mode": "agent", "files": {"../x": ""}}),
            Language::Python,
        );
        assert_eq!(e.field(), Some("files"));
        let e = refused(
            serde_json::json!({"instruction": "x", "mode": "agent"}),
            Language::Go,
        );
        assert_eq!(e.field(), Some("language"));
        let e = refused(
            serde_json::json!({"instruction": "x", "files": {"a": ""}}),
            Language::Python,
        );
        assert_eq!(e.field(), Some("files"));
        let e = refused(
            serde_json::json!({"instruction": "x", "mode": "agent", "candidates": 2}),
            Language::Python,
        );
        assert_eq!(e.field(), Some("candidates"));
    }
}
