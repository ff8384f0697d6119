//! Every Redis name the cluster uses: the keys and the pub/sub channels beside them, all under
//! one configurable prefix (`store.prefix`, so clusters can share a Redis). No other module
//! formats a name; a Lua script that reaches a key whose name only it can know (a batch's
//! webhook, through the link a job holds) is handed that name's exact beginning from here.
//!
//! A name changed here orphans the data of every running deployment: the tests below pin each
//! format byte for byte. `{p}` is the prefix; a tenant is `#` for an open API (no tenant name
//! can be `#`).
//!
//! This module is a leaf: it imports no other module of the store, so every module can build
//! its names here without depending on another's.

use proto::TaskId;

/// The tenant part of a per-tenant name when there is no tenant (an open API).
const OPEN_TENANT: &str = "#";

fn tenant_part(tenant: Option<&str>) -> &str {
    tenant.unwrap_or(OPEN_TENANT)
}

// Executions.

/// `{p}:exec:{id}:meta`, string: MessagePack `ExecutionMeta`, written before the task is
/// published.
pub fn execution_meta(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:exec:{id}:meta")
}

/// `{p}:exec:{id}:result`, string: MessagePack `ExecutionResult`, written once (`SET NX`).
pub fn execution_result(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:exec:{id}:result")
}

/// `{p}:exec:{id}:batch`, string: the id of the execution batch whose webhook waits for
/// this execution.
pub fn execution_batch_link(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:exec:{id}:batch")
}

/// `{p}:ebatch:{id}`, string: MessagePack `ExecutionBatchRecord` of an execution batch with
/// a webhook.
pub fn execution_batch(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:ebatch:{id}")
}

/// `{p}:exec:done`, channel: the id of each execution whose verdict was stored.
pub fn execution_done_channel(prefix: &str) -> String {
    format!("{prefix}:exec:done")
}

// Jobs and batches.

/// The keys of one job, all beginning `{p}:job:{id}:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKeys {
    base: String,
}

impl JobKeys {
    pub fn new(prefix: &str, id: TaskId) -> Self {
        Self {
            base: format!("{prefix}:job:{id}"),
        }
    }

    fn part(&self, part: &str) -> String {
        format!("{}:{part}", self.base)
    }

    /// `{p}:job:{id}:meta`, string: MessagePack `JobMeta`.
    pub fn meta(&self) -> String {
        self.part("meta")
    }

    /// `{p}:job:{id}:status`, string: the `JobStatus` name.
    pub fn status(&self) -> String {
        self.part("status")
    }

    /// `{p}:job:{id}:plan`, string: MessagePack `Plan` (validated, ordered).
    pub fn plan(&self) -> String {
        self.part("plan")
    }

    /// `{p}:job:{id}:pending`, hash: function → its unfinished dependencies.
    pub fn pending(&self) -> String {
        self.part("pending")
    }

    /// `{p}:job:{id}:done`, set: the functions whose outcome is final.
    pub fn done(&self) -> String {
        self.part("done")
    }

    /// `{p}:job:{id}:fn:`: the beginning of every function outcome's key, for the script that
    /// reads the outcomes of functions named in a hash ([`JobKeys::function`] is this and the
    /// name).
    pub fn function_prefix(&self) -> String {
        self.part("fn:")
    }

    /// `{p}:job:{id}:fn:{name}`, string: MessagePack `FunctionOutcome`, rewritten after
    /// every attempt until final.
    pub fn function(&self, name: &str) -> String {
        format!("{}{name}", self.function_prefix())
    }

    /// `{p}:job:{id}:fn:{name}:final`, string `1`: the final outcome is stored, no later
    /// write lands.
    pub fn function_final(&self, name: &str) -> String {
        format!("{}:final", self.function(name))
    }

    /// `{p}:job:{id}:steps`, list: an agent job's transcript, MessagePack `AgentStep`s in
    /// order (a step's index is its position).
    pub fn steps(&self) -> String {
        self.part("steps")
    }

    /// `{p}:job:{id}:published`, set: functions (and `#integrate`) whose task was published.
    pub fn published(&self) -> String {
        self.part("published")
    }

    /// `{p}:job:{id}:tokens`, integer: the tokens the job's model calls have spent so far,
    /// against its budget.
    pub fn tokens(&self) -> String {
        self.part("tokens")
    }

    /// `{p}:job:{id}:result`, string: MessagePack `JobResult`, written once.
    pub fn result(&self) -> String {
        self.part("result")
    }

    /// `{p}:job:{id}:events`, stream: progress events (`data` = JSON), for SSE.
    pub fn events(&self) -> String {
        self.part("events")
    }

    /// `{p}:job:{id}:batch`, string: the id of this job's batch (written with the batch and
    /// by a batch webhook's registration): its webhook waits for the job, its long polls for
    /// the job's end.
    pub fn batch_link(&self) -> String {
        self.part("batch")
    }
}

/// `{p}:batch:{id}`, string: MessagePack `Batch`, its jobs in input order.
pub fn batch(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:batch:{id}")
}

/// `{p}:jobs:unfinished`, sorted set: every unfinished job's id, scored by its submission
/// time (ms).
pub fn unfinished_jobs(prefix: &str) -> String {
    format!("{prefix}:jobs:unfinished")
}

/// `{p}:job:events`, channel: the id of each job with a new progress event.
pub fn job_events_channel(prefix: &str) -> String {
    format!("{prefix}:job:events")
}

/// `{p}:batch:finished`, channel: the id of a batch one of whose jobs has just finished.
pub fn batch_finished_channel(prefix: &str) -> String {
    format!("{prefix}:batch:finished")
}

// Caches.

/// `{p}:cache:solution:{key}`, string: MessagePack `JobResult` of a succeeded job (`key`:
/// the caller's sha256 hex digest, or `*` in a `SCAN` pattern).
pub fn cache_solution(prefix: &str, key: &str) -> String {
    format!("{prefix}:cache:solution:{key}")
}

/// `{p}:cache:function:{key}`, string: MessagePack `FunctionOutcome` of a passed function
/// (`key` as in [`cache_solution`]).
pub fn cache_function(prefix: &str, key: &str) -> String {
    format!("{prefix}:cache:function:{key}")
}

/// `{p}:cache:stats`, hash: hit and miss counters (`solution_hits`, `function_misses`, …).
pub fn cache_stats(prefix: &str) -> String {
    format!("{prefix}:cache:stats")
}

/// `{p}:cache:*`: the `SCAN` pattern of every cache key above.
pub fn cache_pattern(prefix: &str) -> String {
    format!("{prefix}:cache:*")
}

// Idempotency.

/// `{p}:idem:{scope}`, string: JSON `{"hash", "answer"}` (`answer` absent while the first
/// request is in progress).
pub fn idempotency(prefix: &str, scope: &str) -> String {
    format!("{prefix}:idem:{scope}")
}

// Per-tenant indexes and quotas. `kind` is `index::Kind::as_str` (`jobs`, `batches`,
// `executions`): a string here, so this module needs no other.

/// `{p}:index:{kind}:{tenant}`, sorted set: every score 0, members `{ms:013}:{id}` (built
/// and read by `index`), the tenant's submitted work in submission order.
pub fn index(prefix: &str, kind: &str, tenant: Option<&str>) -> String {
    format!("{prefix}:index:{kind}:{}", tenant_part(tenant))
}

/// `{p}:inflight:{kind}:{tenant}`, sorted set: the tenant's admitted, unfinished jobs (or
/// executions) by admission time (ms).
pub fn in_flight(prefix: &str, kind: &str, tenant: Option<&str>) -> String {
    format!("{prefix}:inflight:{kind}:{}", tenant_part(tenant))
}

// Usage.

/// How long one usage bucket is (an hour): part of the key's name, which carries the
/// bucket's start.
pub const USAGE_BUCKET_MS: u64 = 3_600_000;

/// `{p}:usage:{tenant}:{hour}`, hash: field of `UsageTotals` → total, for the hour that
/// holds `at_ms` (`hour`: that hour's start, ms since the epoch).
pub fn usage(prefix: &str, tenant: Option<&str>, at_ms: u64) -> String {
    let hour = at_ms - at_ms % USAGE_BUCKET_MS;
    format!("{prefix}:usage:{}:{hour}", tenant_part(tenant))
}

// Model limits.

/// The keys of one scope's model limits (one provider endpoint and key), all beginning
/// `{p}:limits:{scope}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitKeys {
    base: String,
}

impl LimitKeys {
    pub fn new(prefix: &str, scope: &str) -> Self {
        Self {
            base: format!("{prefix}:limits:{scope}"),
        }
    }

    /// `{p}:limits:{scope}`: no key, but the scope's name as its notices (on
    /// [`lease_freed_channel`] and [`limits_paused_channel`]) and its pause's record in this
    /// process carry it.
    pub fn name(&self) -> &str {
        &self.base
    }

    fn part(&self, part: &str) -> String {
        format!("{}:{part}", self.base)
    }

    /// `{p}:limits:{scope}:leases`, sorted set: lease id (`{tenant}/{unique}`) → expiry (ms).
    pub fn leases(&self) -> String {
        self.part("leases")
    }

    /// `{p}:limits:{scope}:askers`, sorted set: tenant → when it last asked for a lease (ms).
    pub fn askers(&self) -> String {
        self.part("askers")
    }

    /// `{p}:limits:{scope}:adaptive`, hash: `state` (the adaptive limit's state, MessagePack
    /// of the model's `adaptive::State`), `version` (raised by every write).
    pub fn adaptive(&self) -> String {
        self.part("adaptive")
    }

    /// `{p}:limits:{scope}:slow`, hash: `factor`, `at` (ms), `until` (ms), `cut` (ms).
    pub fn slow(&self) -> String {
        self.part("slow")
    }

    /// `{p}:limits:{scope}:{meter}`, string: the GCRA theoretical arrival time (µs).
    pub fn meter(&self, meter: &str) -> String {
        self.part(meter)
    }
}

/// `{p}:limits:freed`, channel: the scope's name ([`LimitKeys::name`]) of each released
/// lease.
pub fn lease_freed_channel(prefix: &str) -> String {
    format!("{prefix}:limits:freed")
}

/// `{p}:limits:paused`, channel: `{scope's name} {ms left}` when a provider asks the
/// model's callers to pause.
pub fn limits_paused_channel(prefix: &str) -> String {
    format!("{prefix}:limits:paused")
}

// Workers' presence.

/// `{p}:workers:able`, sorted set: worker id → expiry (ms), of workers with a model.
pub fn workers_able(prefix: &str) -> String {
    format!("{prefix}:workers:able")
}

/// `{p}:workers:unable`, sorted set: the same for workers without one.
pub fn workers_unable(prefix: &str) -> String {
    format!("{prefix}:workers:unable")
}

/// `{p}:workers:unable:reason`, string: why the last worker without a model has none.
pub fn workers_unable_reason(prefix: &str) -> String {
    format!("{prefix}:workers:unable:reason")
}

/// `{p}:workers:status:{id}`, string: what worker `id` last said about itself (JSON of
/// `proto::api::WorkerStatus`), kept as long as its announcement.
pub fn worker_status(prefix: &str, id: &str) -> String {
    format!("{prefix}:workers:status:{id}")
}

// Sessions.

/// `{p}:session:{id}`, hash: the session's record (`proto::session::SessionRecord`, a field
/// each); kept `result_ttl` after it ends.
pub fn session(prefix: &str, id: &str) -> String {
    format!("{prefix}:session:{id}")
}

/// `{p}:session:{id}:checkpoint`, hash: the session's last checkpoint, what restores it on
/// another worker: `state` (its kernel's, opaque), `files` (a tar of its working directory),
/// `cells` (the cells it is the state after), `calls` (JSON: its last cells' call ids),
/// `unrestorable` (JSON), `bytes`, `taken_ms`; or
/// only `unavailable` (why the last one could not be taken). Expires with the session's
/// lifetime; removed when the session ends.
pub fn session_checkpoint(prefix: &str, id: &str) -> String {
    format!("{prefix}:session:{id}:checkpoint")
}

/// `{p}:sessions:live:{tenant}`, sorted set: the tenant's live sessions → created (ms), its
/// size is what the session quota counts.
pub fn sessions_live(prefix: &str, tenant: Option<&str>) -> String {
    format!("{prefix}:sessions:live:{}", tenant_part(tenant))
}

/// `{p}:sessions:all:{tenant}`, sorted set: the tenant's sessions, live or kept after their
/// end → created (ms), for the listing (members whose record expired are dropped as found).
pub fn sessions_all(prefix: &str, tenant: Option<&str>) -> String {
    format!("{prefix}:sessions:all:{}", tenant_part(tenant))
}

/// `{p}:sessions:deadlines`, sorted set: live session id → when it ends unless called (idle
/// timeout or lifetime, ms); any coordinator ends those past due.
pub fn sessions_deadlines(prefix: &str) -> String {
    format!("{prefix}:sessions:deadlines")
}

/// `{p}:sessions:hosts`, sorted set: worker id → until when (Redis's clock, ms) it is alive as
/// a session host.
pub fn session_hosts(prefix: &str) -> String {
    format!("{prefix}:sessions:hosts")
}

/// `{p}:sessions:host:{id}`, string: JSON `proto::session::SessionHost`, with the same time
/// to live.
pub fn session_host(prefix: &str, id: &str) -> String {
    format!("{}{id}", session_host_prefix(prefix))
}

/// `{p}:sessions:host:`: the beginning of every host record's key, for the script that reads
/// the live hosts' records.
pub fn session_host_prefix(prefix: &str) -> String {
    format!("{prefix}:sessions:host:")
}

/// `{p}:sessions:secret`, string: the bearer token of the workers' session API, made by the
/// first process that needs it (`SET NX`).
pub fn sessions_secret(prefix: &str) -> String {
    format!("{prefix}:sessions:secret")
}

// Tenants.

/// `{p}:tenants`, hash: tenant → weight.
pub fn tenants(prefix: &str) -> String {
    format!("{prefix}:tenants")
}

// Webhooks. `kind` is `webhooks::HookKind::as_str` (`job`, `batch`, `execution_batch`).

/// `{p}:hook:{kind}:`: the beginning of the webhook keys of `kind`, for a script that reads
/// the id from a link ([`hook`] is this and the id).
pub fn hook_prefix(prefix: &str, kind: &str) -> String {
    format!("{prefix}:hook:{kind}:")
}

/// `{p}:hook:{kind}:{id}`, hash: `url`, `tenant`, `state` (`waiting` → `pending` →
/// `delivered` / `failed`), `since` (ms the resource ended), for a batch `left` (its
/// resources not ended).
pub fn hook(prefix: &str, kind: &str, id: TaskId) -> String {
    format!("{}{id}", hook_prefix(prefix, kind))
}

/// `{p}:hook:{kind}:{id}:attempts`, list: the webhook's attempts (JSON `WebhookAttempt`),
/// oldest first.
pub fn hook_attempts(prefix: &str, kind: &str, id: TaskId) -> String {
    format!("{}:attempts", hook(prefix, kind, id))
}

/// `{p}:hooks:due`, sorted set: [`due_member`]s by when their next attempt is due (ms).
pub fn hooks_due(prefix: &str) -> String {
    format!("{prefix}:hooks:due")
}

/// `{kind}:`: the beginning of the due members of `kind`, for a script that reads the id
/// from a link.
pub fn due_member_prefix(kind: &str) -> String {
    format!("{kind}:")
}

/// `{kind}:{id}`: a webhook's member of [`hooks_due`].
pub fn due_member(kind: &str, id: TaskId) -> String {
    format!("{}{id}", due_member_prefix(kind))
}

/// The kind and the id of a [`due_member`] (the id unparsed).
pub fn split_due_member(member: &str) -> Option<(&str, &str)> {
    member.split_once(':')
}

// Lessons (the memory of repairs).

/// The keys of one set of lessons: a tenant's (`{p}:lessons:{tenant}`) or the operators'
/// shared set (`{p}:lessons-shared`, apart from every tenant's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LessonKeys {
    base: String,
}

impl LessonKeys {
    /// A tenant's lessons.
    pub fn tenant(prefix: &str, tenant: Option<&str>) -> Self {
        Self {
            base: format!("{prefix}:lessons:{}", tenant_part(tenant)),
        }
    }

    /// The set operators share with every tenant.
    pub fn shared(prefix: &str) -> Self {
        Self {
            base: format!("{prefix}:lessons-shared"),
        }
    }

    /// `{base}`, hash: lesson id → MessagePack `Lesson`.
    pub fn lessons(&self) -> String {
        self.base.clone()
    }

    /// `{base}:counts`, hash: `{id}:r` → repairs shown the lesson, `{id}:h` → those that
    /// passed, `{id}:c` → when it was made (ms; the order of eviction among equals).
    pub fn counts(&self) -> String {
        format!("{}:counts", self.base)
    }

    /// `{base}:version`, string: a counter bumped by every change, so a process holding the
    /// set's index knows when to read it again.
    pub fn version(&self) -> String {
        format!("{}:version", self.base)
    }

    /// `{base}:uses`, list: MessagePack `LessonUse`s of the set's lessons, newest first,
    /// bounded (those of a lesson since removed are skipped as read).
    pub fn uses(&self) -> String {
        format!("{}:uses", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0190a5b2-0000-7000-8000-000000000000";

    fn id() -> TaskId {
        ID.parse().unwrap()
    }

    /// Every name, as running deployments have it stored: a failure here means data there
    /// would no longer be found.
    #[test]
    fn names_keep_their_exact_format() {
        let p = "codegen";
        let id = id();
        let pinned: Vec<(String, String)> = vec![
            (execution_meta(p, id), format!("codegen:exec:{ID}:meta")),
            (execution_result(p, id), format!("codegen:exec:{ID}:result")),
            (
                execution_batch_link(p, id),
                format!("codegen:exec:{ID}:batch"),
            ),
            (execution_batch(p, id), format!("codegen:ebatch:{ID}")),
            (execution_done_channel(p), "codegen:exec:done".into()),
            (
                LessonKeys::tenant(p, Some("acme")).lessons(),
                "codegen:lessons:acme".into(),
            ),
            (
                LessonKeys::tenant(p, None).counts(),
                "codegen:lessons:#:counts".into(),
            ),
            (
                LessonKeys::shared(p).version(),
                "codegen:lessons-shared:version".into(),
            ),
            (
                LessonKeys::tenant(p, Some("acme")).uses(),
                "codegen:lessons:acme:uses".into(),
            ),
            (batch(p, id), format!("codegen:batch:{ID}")),
            (unfinished_jobs(p), "codegen:jobs:unfinished".into()),
            (job_events_channel(p), "codegen:job:events".into()),
            (batch_finished_channel(p), "codegen:batch:finished".into()),
            (
                cache_solution(p, "ab12"),
                "codegen:cache:solution:ab12".into(),
            ),
            (cache_solution(p, "*"), "codegen:cache:solution:*".into()),
            (
                cache_function(p, "ab12"),
                "codegen:cache:function:ab12".into(),
            ),
            (cache_function(p, "*"), "codegen:cache:function:*".into()),
            (cache_stats(p), "codegen:cache:stats".into()),
            (cache_pattern(p), "codegen:cache:*".into()),
            (
                idempotency(p, "acme:POST /v1/jobs:k1"),
                "codegen:idem:acme:POST /v1/jobs:k1".into(),
            ),
            (
                index(p, "jobs", Some("acme")),
                "codegen:index:jobs:acme".into(),
            ),
            (
                index(p, "executions", None),
                "codegen:index:executions:#".into(),
            ),
            (index("", "batches", None), ":index:batches:#".into()),
            (
                in_flight(p, "jobs", Some("acme")),
                "codegen:inflight:jobs:acme".into(),
            ),
            (
                in_flight(p, "executions", None),
                "codegen:inflight:executions:#".into(),
            ),
            (
                usage(p, Some("acme"), 7_200_000 + 59),
                "codegen:usage:acme:7200000".into(),
            ),
            (usage(p, None, 5), "codegen:usage:#:0".into()),
            (lease_freed_channel(p), "codegen:limits:freed".into()),
            (limits_paused_channel(p), "codegen:limits:paused".into()),
            (workers_able(p), "codegen:workers:able".into()),
            (workers_unable(p), "codegen:workers:unable".into()),
            (
                workers_unable_reason(p),
                "codegen:workers:unable:reason".into(),
            ),
            (tenants(p), "codegen:tenants".into()),
            (session(p, "s1"), "codegen:session:s1".into()),
            (
                sessions_live(p, Some("acme")),
                "codegen:sessions:live:acme".into(),
            ),
            (sessions_all(p, None), "codegen:sessions:all:#".into()),
            (sessions_deadlines(p), "codegen:sessions:deadlines".into()),
            (session_hosts(p), "codegen:sessions:hosts".into()),
            (session_host(p, "w1"), "codegen:sessions:host:w1".into()),
            (sessions_secret(p), "codegen:sessions:secret".into()),
            (hook_prefix(p, "batch"), "codegen:hook:batch:".into()),
            (hook(p, "job", id), format!("codegen:hook:job:{ID}")),
            (
                hook(p, "execution_batch", id),
                format!("codegen:hook:execution_batch:{ID}"),
            ),
            (
                hook_attempts(p, "batch", id),
                format!("codegen:hook:batch:{ID}:attempts"),
            ),
            (hooks_due(p), "codegen:hooks:due".into()),
            (
                due_member_prefix("execution_batch"),
                "execution_batch:".into(),
            ),
            (due_member("job", id), format!("job:{ID}")),
        ];
        for (built, expected) in pinned {
            assert_eq!(built, expected);
        }
    }

    #[test]
    fn a_jobs_keys_keep_their_exact_format() {
        let keys = JobKeys::new("codegen", id());
        let base = format!("codegen:job:{ID}");
        let pinned = [
            (keys.meta(), "meta"),
            (keys.status(), "status"),
            (keys.plan(), "plan"),
            (keys.pending(), "pending"),
            (keys.done(), "done"),
            (keys.function_prefix(), "fn:"),
            (keys.function("add"), "fn:add"),
            (keys.function_final("add"), "fn:add:final"),
            (keys.published(), "published"),
            (keys.steps(), "steps"),
            (keys.result(), "result"),
            (keys.events(), "events"),
            (keys.batch_link(), "batch"),
        ];
        for (built, part) in pinned {
            assert_eq!(built, format!("{base}:{part}"));
        }
    }

    #[test]
    fn a_scopes_limit_keys_keep_their_exact_format() {
        let keys = LimitKeys::new("codegen", "openai-3f2a");
        assert_eq!(keys.name(), "codegen:limits:openai-3f2a");
        assert_eq!(keys.leases(), "codegen:limits:openai-3f2a:leases");
        assert_eq!(keys.askers(), "codegen:limits:openai-3f2a:askers");
        assert_eq!(keys.slow(), "codegen:limits:openai-3f2a:slow");
        assert_eq!(keys.meter("rps"), "codegen:limits:openai-3f2a:rps");
    }

    #[test]
    fn names_a_script_completes_match_the_ones_built_here() {
        // The scripts that end work append an id they read to these beginnings.
        let (p, id) = ("codegen", id());
        assert_eq!(
            format!("{}{id}", hook_prefix(p, "batch")),
            hook(p, "batch", id)
        );
        assert_eq!(
            format!("{}{id}", due_member_prefix("batch")),
            due_member("batch", id)
        );
        assert_eq!(
            format!("{}add", JobKeys::new(p, id).function_prefix()),
            JobKeys::new(p, id).function("add")
        );
        assert_eq!(
            split_due_member(&due_member("execution_batch", id)),
            Some(("execution_batch", ID))
        );
    }
}
