//! What finishing a function does to its job's DAG: the one copy of that rule. The Redis
//! scripts and the in-memory store apply the [`Effects`] they are given and decide nothing
//! themselves. Both apply them only while the job runs: once it is `integrating` (a function
//! failed, or the last one finished) a completion releases nothing and leaves the status.

use proto::job::{FunctionOutcome, Plan};

/// When the job goes on to integration after a function finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrate {
    /// At once: the function failed, so its dependants cannot be built on it and the job
    /// integrates what it has.
    Now,
    /// When this was the last function of the plan to finish.
    WhenLast,
}

impl Integrate {
    /// The name the Redis scripts read.
    pub fn as_str(self) -> &'static str {
        match self {
            Integrate::Now => "now",
            Integrate::WhenLast => "last",
        }
    }

    /// Whether a completion that leaves every function done (`all_done`) or not starts the
    /// integration.
    pub fn starts(self, all_done: bool) -> bool {
        match self {
            Integrate::Now => true,
            Integrate::WhenLast => all_done,
        }
    }
}

/// The effects of a function's final outcome on its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effects<'a> {
    /// The dependants whose counters go down: a passed function's, and none of a failed one's.
    pub release: &'a [String],
    pub integrate: Integrate,
}

impl<'a> Effects<'a> {
    /// The rule.
    pub fn of(plan: &'a Plan, outcome: &FunctionOutcome) -> Self {
        if outcome.passed {
            Effects {
                release: plan
                    .dependants
                    .get(&outcome.name)
                    .map_or(&[][..], Vec::as_slice),
                integrate: Integrate::WhenLast,
            }
        } else {
            Effects {
                release: &[],
                integrate: Integrate::Now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            specs: Vec::new(),
            dependants: [("a".to_owned(), vec!["b".to_owned(), "c".to_owned()])].into(),
            refused: None,
            request_code: None,
        }
    }

    fn outcome(name: &str, passed: bool) -> FunctionOutcome {
        let mut outcome = FunctionOutcome::new(name);
        outcome.passed = passed;
        outcome
    }

    #[test]
    fn a_passed_function_releases_its_dependants_and_integrates_when_last() {
        let plan = plan();
        let effects = Effects::of(&plan, &outcome("a", true));
        assert_eq!(effects.release, ["b", "c"]);
        assert!(!effects.integrate.starts(false));
        assert!(effects.integrate.starts(true));
    }

    #[test]
    fn a_failed_function_releases_nothing_and_integrates_now() {
        let plan = plan();
        let effects = Effects::of(&plan, &outcome("a", false));
        assert!(effects.release.is_empty());
        assert!(effects.integrate.starts(false));
    }
}
