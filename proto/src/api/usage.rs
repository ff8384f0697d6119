//! `GET /v1/usage`: what a tenant's finished work cost.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ExecutionResult;
use crate::job::JobResult;

/// Totals of the jobs and executions that ended in `[from_ms, to_ms)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    /// The tenant (absent for an API without keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tenant: Option<String>,
    /// The window, in milliseconds since the epoch, widened to whole hours (what is kept).
    pub from_ms: u64,
    pub to_ms: u64,
    #[serde(flatten)]
    pub totals: UsageTotals,
    /// The totals per hour or per day (`per`), oldest first; periods that charged nothing
    /// are left out. Only when `per` was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub series: Option<Vec<UsagePeriod>>,
}

/// One hour's or one day's (UTC) totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsagePeriod {
    /// The period's start, ms since the epoch.
    pub from_ms: u64,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// How `GET /v1/usage` divides its window (`per`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsagePer {
    Hour,
    Day,
}

impl UsagePer {
    pub fn millis(self) -> u64 {
        match self {
            UsagePer::Hour => 3_600_000,
            UsagePer::Day => 86_400_000,
        }
    }

    /// `hours` (each hour's start and totals, in order) added up per period.
    pub fn group(self, hours: &[(u64, UsageTotals)]) -> Vec<UsagePeriod> {
        let mut periods: Vec<UsagePeriod> = Vec::new();
        for (start, totals) in hours {
            let from_ms = start - start % self.millis();
            match periods.last_mut() {
                Some(last) if last.from_ms == from_ms => last.totals.add_all(totals),
                _ => periods.push(UsagePeriod {
                    from_ms,
                    totals: *totals,
                }),
            }
        }
        periods
    }
}

/// What work cost, added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageTotals {
    /// Jobs that ended (succeeded, failed or cancelled; solution-cache hits included).
    pub jobs: u64,
    /// Executions that got their verdict.
    pub executions: u64,
    pub model_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Wall time of sandbox runs.
    pub sandbox_ms: u64,
    /// CPU time of sandbox runs (their containers' cgroups).
    pub sandbox_cpu_ms: u64,
}

impl UsageTotals {
    /// The field names, as stored and as answered, with each one's value.
    pub fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("jobs", self.jobs),
            ("executions", self.executions),
            ("model_calls", self.model_calls),
            ("prompt_tokens", self.prompt_tokens),
            ("completion_tokens", self.completion_tokens),
            ("sandbox_ms", self.sandbox_ms),
            ("sandbox_cpu_ms", self.sandbox_cpu_ms),
        ]
    }

    /// Adds `value` to the field `name` (unknown names are ignored: a newer writer's).
    pub fn add(&mut self, name: &str, value: u64) {
        let field = match name {
            "jobs" => &mut self.jobs,
            "executions" => &mut self.executions,
            "model_calls" => &mut self.model_calls,
            "prompt_tokens" => &mut self.prompt_tokens,
            "completion_tokens" => &mut self.completion_tokens,
            "sandbox_ms" => &mut self.sandbox_ms,
            "sandbox_cpu_ms" => &mut self.sandbox_cpu_ms,
            _ => return,
        };
        *field = field.saturating_add(value);
    }

    /// The sum of `hours` (each an hour's start and totals).
    pub fn sum_of(hours: &[(u64, UsageTotals)]) -> Self {
        let mut totals = Self::default();
        for (_, hour) in hours {
            totals.add_all(hour);
        }
        totals
    }

    /// Adds every field of `other`.
    pub fn add_all(&mut self, other: &Self) {
        for (name, value) in other.fields() {
            self.add(name, value);
        }
    }

    /// What one ended job cost, as its result reports it.
    pub fn of_job(result: &JobResult) -> Self {
        let m = &result.metrics;
        Self {
            jobs: 1,
            model_calls: u64::from(m.model_calls),
            prompt_tokens: m.tokens.prompt,
            completion_tokens: m.tokens.completion,
            sandbox_ms: m.execution_ms,
            sandbox_cpu_ms: m.sandbox_cpu_ms,
            ..Self::default()
        }
    }

    /// What one execution cost, as its verdict reports it.
    pub fn of_execution(result: &ExecutionResult) -> Self {
        Self {
            executions: 1,
            sandbox_ms: result.duration_ms,
            sandbox_cpu_ms: result.cpu_ms.unwrap_or(0),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_adds_under_its_own_name() {
        let one = UsageTotals {
            jobs: 1,
            executions: 2,
            model_calls: 3,
            prompt_tokens: 4,
            completion_tokens: 5,
            sandbox_ms: 6,
            sandbox_cpu_ms: 7,
        };
        let mut sum = UsageTotals::default();
        for (name, value) in one.fields() {
            sum.add(name, value);
            sum.add(name, value);
        }
        sum.add("future_field", 9);
        let json = serde_json::to_value(sum).unwrap();
        for (name, value) in one.fields() {
            assert_eq!(json[name], 2 * value, "{name}");
        }
    }

    #[test]
    fn hours_add_up_per_utc_day_and_keep_their_order() {
        let hour = UsagePer::Hour.millis();
        let day = UsagePer::Day.millis();
        let jobs = |n| UsageTotals {
            jobs: n,
            ..Default::default()
        };
        let hours = [
            (day - hour, jobs(1)),
            (day, jobs(2)),
            (day + 5 * hour, jobs(3)),
            (3 * day, jobs(4)),
        ];
        let per_day: Vec<(u64, u64)> = UsagePer::Day
            .group(&hours)
            .iter()
            .map(|p| (p.from_ms, p.totals.jobs))
            .collect();
        assert_eq!(per_day, vec![(0, 1), (day, 5), (3 * day, 4)]);
        assert_eq!(UsagePer::Hour.group(&hours).len(), 4);
        let json = serde_json::to_value(UsagePer::Hour.group(&hours)[1]).unwrap();
        assert_eq!(json["from_ms"], day);
        assert_eq!(json["jobs"], 2);
    }
}
