//! A job's result, assembled in one place whichever way the job ends: integrated (the
//! worker), failed or cancelled before its integration (the coordinator), or answered from
//! the solution cache. Pure: what the job produced in, its result out.

use std::collections::BTreeMap;

use crate::TaskId;
use crate::generation::{FunctionSpec, TestCase, TestKind};
use crate::job::{
    CacheOutcome, FunctionOutcome, JobMeta, JobMetrics, JobResult, JobStatus, PlanSource, Quality,
    Tally, TestResult, Validation,
};

/// How a job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Its module was assembled and run together (or, where a function could only be checked
    /// statically, not run at all).
    Integrated(Integration),
    /// Ended before its integration with `status` (`failed`, `cancelled`) and why.
    Early { status: JobStatus, reason: String },
    /// An agent job's run ended (`failure`: why, when it did not finish).
    Agent {
        outcome: crate::agent::AgentOutcome,
        failure: Option<String>,
    },
}

/// What the integration gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Integration {
    /// The verdicts of the integration run, in the plan's order (a function's own where the
    /// run gave none; empty when nothing ran).
    pub test_results: Vec<TestResult>,
    pub quality: Quality,
    /// Wall and CPU time of the integration run (0 when nothing ran).
    pub execution_ms: u64,
    pub sandbox_cpu_ms: u64,
}

impl JobResult {
    /// The result of `meta`'s job, planned as `specs`, whose functions produced `outcomes`
    /// (by name; a function never started has none), ending as `ending` at `now_ms`.
    pub fn assemble(
        meta: &JobMeta,
        specs: &[FunctionSpec],
        outcomes: &BTreeMap<String, FunctionOutcome>,
        ending: Ending,
        now_ms: u64,
    ) -> JobResult {
        // In the plan's order.
        let produced: Vec<&FunctionOutcome> =
            specs.iter().filter_map(|s| outcomes.get(&s.name)).collect();
        let mut metrics = JobMetrics {
            total_ms: now_ms.saturating_sub(meta.submitted_at_ms),
            cache: CacheOutcome::Miss,
            model_calls: meta.plan_model_calls,
            tokens: meta.plan_tokens,
            ..JobMetrics::default()
        };
        for o in &produced {
            metrics.model_calls += o.model_calls;
            metrics.tokens.prompt += o.tokens.prompt;
            metrics.tokens.completion += o.tokens.completion;
            metrics.generation_ms += o.generation_ms;
            metrics.execution_ms += o.execution_ms;
            metrics.sandbox_cpu_ms += o.cpu_ms;
        }
        let improvement_history = produced
            .iter()
            .flat_map(|o| o.history.iter().cloned())
            .collect();
        let mut result = JobResult {
            job_id: meta.id,
            status: JobStatus::Failed,
            instruction: meta.request.instruction.clone(),
            language: meta.request.language,
            language_reason: meta.request.language_reason.clone(),
            plan_source: PlanSource::Model,
            function_specs: specs.to_vec(),
            implementations: BTreeMap::new(),
            tests: BTreeMap::new(),
            contradicted_tests: produced
                .iter()
                .filter(|o| !o.contradicted.is_empty())
                .map(|o| (o.name.clone(), o.contradicted.clone()))
                .collect(),
            test_results: Vec::new(),
            all_tests_passed: false,
            passed_given: Tally::default(),
            passed_generated: Tally::default(),
            stopped_by: produced.iter().filter_map(|o| o.stopped_by).max(),
            improvement_history,
            documentation: String::new(),
            quality: Quality::default(),
            metrics,
            failure: None,
            webhook: None,
            validation: Validation::NotValidated,
            manual_review_recommended: true,
            change: None,
            agent: None,
        };
        match ending {
            Ending::Agent { outcome, failure } => {
                use crate::agent::AgentEnd;
                result.status = match outcome.ended_by {
                    AgentEnd::Finished => JobStatus::Succeeded,
                    AgentEnd::Cancelled => JobStatus::Cancelled,
                    _ => JobStatus::Failed,
                };
                result.failure = match (result.status, failure) {
                    (JobStatus::Succeeded, _) => None,
                    (_, Some(failure)) => Some(failure),
                    (_, None) => Some(format!(
                        "the agent's run ended: {}",
                        outcome.ended_by.as_str()
                    )),
                };
                let totals = outcome.totals;
                result.metrics.model_calls += totals.model_calls;
                result.metrics.tokens.prompt += totals.prompt_tokens;
                result.metrics.tokens.completion += totals.completion_tokens;
                result.metrics.sandbox_cpu_ms += totals.sandbox_cpu_ms;
                result.agent = Some(outcome);
            }
            Ending::Early { status, reason } => {
                result.status = status;
                result.failure = Some(reason);
                // Only code that passed its tests: a half-repaired attempt is not a result.
                result.implementations = produced
                    .iter()
                    .filter(|o| o.passed)
                    .filter_map(|o| Some((o.name.clone(), o.code.clone()?)))
                    .collect();
                result.tests = produced
                    .iter()
                    .filter(|o| !o.tests.is_empty())
                    .map(|o| (o.name.clone(), o.tests.clone()))
                    .collect();
                result.test_results = produced
                    .iter()
                    .filter(|o| o.done)
                    .flat_map(|o| o.test_results.iter().cloned())
                    .collect();
            }
            Ending::Integrated(run) => {
                let static_only = produced
                    .iter()
                    .any(|o| o.validation == Validation::StaticAnalysisOnly);
                let all_passed_before = specs
                    .iter()
                    .all(|s| outcomes.get(&s.name).is_some_and(|o| o.passed));
                result.all_tests_passed = !static_only
                    && all_passed_before
                    && !run.test_results.is_empty()
                    && run.test_results.iter().all(|r| r.passed);
                result.failure = specs
                    .iter()
                    .find_map(|s| match outcomes.get(&s.name) {
                        None => Some(format!("{} was never implemented", s.name)),
                        Some(o) if !o.passed => Some(format!(
                            "{}: {}",
                            s.name,
                            o.failure.clone().unwrap_or_else(|| "tests fail".into())
                        )),
                        _ => None,
                    })
                    .or_else(|| {
                        // Static-only modules were never run: no test failed, none passed either.
                        (!static_only && !result.all_tests_passed)
                            .then(|| "tests fail when the module is assembled".into())
                    });
                result.status = if result.failure.is_none() {
                    JobStatus::Succeeded
                } else {
                    JobStatus::Failed
                };
                result.implementations = produced
                    .iter()
                    .filter_map(|o| Some((o.name.clone(), o.code.clone()?)))
                    .collect();
                result.tests = produced
                    .iter()
                    .map(|o| (o.name.clone(), o.tests.clone()))
                    .collect();
                result.test_results = run.test_results;
                result.documentation =
                    documentation(meta, specs, &result.tests, &result.test_results);
                result.quality = run.quality;
                result.metrics.execution_ms += run.execution_ms;
                result.metrics.sandbox_cpu_ms += run.sandbox_cpu_ms;
                result.validation = if static_only {
                    Validation::StaticAnalysisOnly
                } else {
                    Validation::Tested
                };
                result.manual_review_recommended =
                    static_only || result.status != JobStatus::Succeeded;
            }
        }
        (result.passed_given, result.passed_generated) = tallies(&produced, &result.test_results);
        result
    }

    /// A cached result answering job `id`: the same solution, the job's own id, and metrics
    /// that say the cache answered (nothing was spent).
    pub fn from_cache(mut cached: JobResult, id: TaskId) -> JobResult {
        cached.job_id = id;
        cached.metrics = JobMetrics {
            cache: CacheOutcome::Hit,
            ..JobMetrics::default()
        };
        cached
    }
}

/// The final verdicts of the cases the request gave and of those the model wrote, each with
/// what writing them cost (a case with no verdict counts as not passed).
fn tallies(produced: &[&FunctionOutcome], results: &[TestResult]) -> (Tally, Tally) {
    let (mut given, mut generated) = (Tally::default(), Tally::default());
    for outcome in produced {
        generated.tokens.prompt += outcome.test_tokens.prompt;
        generated.tokens.completion += outcome.test_tokens.completion;
        for case in &outcome.tests {
            let tally = if case.given {
                &mut given
            } else {
                &mut generated
            };
            tally.total += 1;
            let passed = results
                .iter()
                .any(|r| r.function == outcome.name && r.test == case.name && r.passed);
            tally.passed += u32::from(passed);
        }
    }
    (given, generated)
}

/// The module's documentation: the request, then each function's signature and purpose, and
/// a usage example: one of its test cases that passed in the final run (a normal case first),
/// so every example shown has run in the sandbox; a function none of whose cases passed says so.
fn documentation(
    meta: &JobMeta,
    specs: &[FunctionSpec],
    tests: &BTreeMap<String, Vec<TestCase>>,
    results: &[TestResult],
) -> String {
    let mut doc = format!("# Solution\n\n{}\n", meta.request.instruction);
    for spec in specs {
        let args: Vec<String> = spec
            .inputs
            .iter()
            .map(|p| format!("{}: {}", p.name, p.ty))
            .collect();
        doc.push_str(&format!(
            "\n## `{}({}) -> {}`\n\n{}\n\nReturns: {}\n",
            spec.name,
            args.join(", "),
            spec.outputs.ty,
            spec.purpose,
            spec.outputs.description
        ));
        if !spec.dependencies.is_empty() {
            doc.push_str(&format!("\nUses: {}\n", spec.dependencies.join(", ")));
        }
        doc.push_str(&example(spec, tests.get(&spec.name), results));
    }
    doc
}

/// `spec`'s usage example: a case of `cases` that passed in `results`, as a call with its
/// inputs (JSON, in the parameters' order) and what it gave.
fn example(spec: &FunctionSpec, cases: Option<&Vec<TestCase>>, results: &[TestResult]) -> String {
    let passed = |case: &&TestCase| {
        results
            .iter()
            .any(|r| r.function == spec.name && r.test == case.name && r.passed)
    };
    let cases = cases.map(Vec::as_slice).unwrap_or_default();
    let Some(case) = cases.iter().filter(passed).min_by_key(|c| match c.kind {
        TestKind::Normal => 0,
        TestKind::Edge => 1,
        TestKind::Error => 2,
    }) else {
        return "\nExample: none (no case of this function passed).\n".into();
    };
    let args: Vec<String> = spec
        .inputs
        .iter()
        .map(|p| {
            case.inputs
                .get(&p.name)
                .map_or("null".into(), ToString::to_string)
        })
        .collect();
    let outcome = match &case.expected_error {
        Some(error) => format!("fails with {error}"),
        None => format!("→ {}", case.expected_output),
    };
    format!(
        "\nExample (test case `{}`, run in the sandbox: passed):\n\n    {}({}) {outcome}\n",
        case.name,
        spec.name,
        args.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Language;
    use crate::generation::{Complexity, Output};
    use crate::job::{JobRequest, Tokens};

    fn spec(name: &str, dependencies: &[&str]) -> FunctionSpec {
        FunctionSpec {
            name: name.into(),
            purpose: format!("does {name}"),
            inputs: vec![],
            outputs: Output {
                ty: "int".into(),
                description: "a number".into(),
            },
            dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
            complexity: Complexity::Simple,
        }
    }

    fn meta() -> JobMeta {
        JobMeta {
            id: TaskId::new(),
            tenant: None,
            request: JobRequest {
                instruction: "add things".into(),
                language: Language::Python,
                language_reason: String::new(),
                constraints: None,
                test_requirements: None,
                max_iterations: 3,
                candidates: 1,
                max_tokens_total: None,
                rework: None,
                agent: None,
                memory: Default::default(),
            },
            submitted_at_ms: 1_000,
            replans: 0,
            plan_tokens: Tokens {
                prompt: 10,
                completion: 5,
            },
            plan_model_calls: 1,
            cache_key: None,
            max_functions: crate::job::DEFAULT_MAX_FUNCTIONS,
            request_id: None,
        }
    }

    fn verdict(function: &str, passed: bool) -> TestResult {
        TestResult {
            function: function.into(),
            test: "t".into(),
            passed,
            actual_output: serde_json::Value::Null,
            error: None,
            error_kind: None,
            duration_ms: 0.1,
        }
    }

    /// `name`, finished: passed or not, with code, one verdict and one model call.
    fn outcome(name: &str, passed: bool) -> FunctionOutcome {
        FunctionOutcome {
            passed,
            done: true,
            code: Some(format!("def {name}(): ...")),
            tests: vec![TestCase {
                name: "t".into(),
                kind: TestKind::Normal,
                inputs: serde_json::Map::new(),
                expected_output: serde_json::json!(1),
                expected_error: None,
                given: false,
            }],
            test_results: vec![verdict(name, passed)],
            failure: (!passed).then(|| "wrong output".into()),
            tokens: Tokens {
                prompt: 100,
                completion: 50,
            },
            model_calls: 1,
            generation_ms: 7,
            execution_ms: 3,
            cpu_ms: 2,
            ..FunctionOutcome::new(name)
        }
    }

    fn integration(results: Vec<TestResult>) -> Ending {
        Ending::Integrated(Integration {
            test_results: results,
            quality: Quality::default(),
            execution_ms: 20,
            sandbox_cpu_ms: 9,
        })
    }

    #[test]
    fn an_integrated_job_whose_verdicts_all_pass_succeeds_with_everything_it_spent() {
        let specs = [spec("a", &[]), spec("b", &["a"])];
        let outcomes = [("a", true), ("b", true)]
            .map(|(n, p)| (n.to_owned(), outcome(n, p)))
            .into();
        let ending = integration(vec![verdict("a", true), verdict("b", true)]);
        let result = JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000);
        assert_eq!(result.status, JobStatus::Succeeded);
        assert!(result.all_tests_passed && !result.manual_review_recommended);
        assert_eq!(
            (result.failure, result.validation),
            (None, Validation::Tested)
        );
        assert_eq!(result.implementations.len(), 2);
        assert!(
            result.documentation.contains("Uses: a"),
            "{}",
            result.documentation
        );
        // Each function's example is its case that passed in the final run, as a call.
        for f in ["a", "b"] {
            assert!(
                result.documentation.contains(&format!(
                    "Example (test case `t`, run in the sandbox: passed):\n\n    {f}() → 1"
                )),
                "{}",
                result.documentation
            );
        }
        // A case that did not pass is never an example.
        let failed = example(
            &specs[0],
            Some(&outcomes["a"].tests),
            &[verdict("a", false)],
        );
        assert_eq!(
            failed,
            "\nExample: none (no case of this function passed).\n"
        );
        let m = &result.metrics;
        assert_eq!((m.total_ms, m.model_calls, m.generation_ms), (4_000, 3, 14));
        assert_eq!((m.tokens.prompt, m.tokens.completion), (210, 105));
        assert_eq!(
            (m.execution_ms, m.sandbox_cpu_ms),
            (26, 13),
            "the functions' and the run's"
        );
    }

    #[test]
    fn the_result_counts_given_and_generated_cases_apart_and_says_a_budget_stopped_it() {
        let specs = [spec("a", &[])];
        let mut a = outcome("a", false);
        let case = |name: &str, given: bool| TestCase {
            name: name.into(),
            given,
            ..a.tests[0].clone()
        };
        a.tests = vec![
            case("given_1", true),
            case("given_2", true),
            case("t", false),
        ];
        a.test_tokens = Tokens {
            prompt: 40,
            completion: 20,
        };
        a.stopped_by = Some(crate::job::StoppedBy::Budget);
        let outcomes = [("a".to_owned(), a)].into();
        let pass = |test: &str, passed: bool| TestResult {
            test: test.into(),
            ..verdict("a", passed)
        };
        // given_2 has no verdict: not passed.
        let ending = integration(vec![pass("given_1", true), pass("t", false)]);
        let result = JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000);
        assert_eq!(
            (result.passed_given.passed, result.passed_given.total),
            (1, 2)
        );
        assert_eq!(result.passed_given.tokens, Tokens::default());
        assert_eq!(
            (
                result.passed_generated.passed,
                result.passed_generated.total
            ),
            (0, 1)
        );
        assert_eq!(result.passed_generated.tokens.prompt, 40);
        assert_eq!(result.stopped_by, Some(crate::job::StoppedBy::Budget));
        assert_eq!(result.status, JobStatus::Failed);
    }

    #[test]
    fn a_job_says_a_spent_budget_over_a_repair_that_did_not_help() {
        let specs = [spec("a", &[]), spec("b", &[])];
        let mut a = outcome("a", false);
        a.stopped_by = Some(crate::job::StoppedBy::NoProgress);
        let mut b = outcome("b", false);
        let both = |b: &FunctionOutcome| {
            let outcomes = [("a".to_owned(), a.clone()), ("b".to_owned(), b.clone())].into();
            let ending = integration(vec![verdict("a", false), verdict("b", false)]);
            JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000).stopped_by
        };
        assert_eq!(both(&b), Some(crate::job::StoppedBy::NoProgress));
        b.stopped_by = Some(crate::job::StoppedBy::Budget);
        assert_eq!(both(&b), Some(crate::job::StoppedBy::Budget));
    }

    #[test]
    fn an_integrated_job_fails_naming_the_function_that_never_passed_or_never_ran() {
        let specs = [spec("a", &[]), spec("b", &[]), spec("c", &[])];
        let outcomes: BTreeMap<_, _> = [("a", true), ("b", false)]
            .map(|(n, p)| (n.to_owned(), outcome(n, p)))
            .into();
        let ending = integration(vec![verdict("a", true), verdict("b", false)]);
        let result = JobResult::assemble(&meta(), &specs, &outcomes, ending.clone(), 5_000);
        assert_eq!(result.status, JobStatus::Failed);
        assert_eq!(result.failure.as_deref(), Some("b: wrong output"));
        assert!(!result.all_tests_passed && result.manual_review_recommended);

        let passing = [("a", true), ("b", true)]
            .map(|(n, p)| (n.to_owned(), outcome(n, p)))
            .into();
        let result = JobResult::assemble(&meta(), &specs, &passing, ending, 5_000);
        assert_eq!(result.failure.as_deref(), Some("c was never implemented"));
    }

    #[test]
    fn functions_that_pass_alone_but_not_together_fail_the_job() {
        let specs = [spec("a", &[])];
        let outcomes = [("a".to_owned(), outcome("a", true))].into();
        let ending = integration(vec![verdict("a", false)]);
        let result = JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000);
        assert_eq!(
            (result.status, result.failure.as_deref()),
            (
                JobStatus::Failed,
                Some("tests fail when the module is assembled")
            )
        );
    }

    #[test]
    fn a_module_checked_only_statically_succeeds_untested_and_asks_for_review() {
        let specs = [spec("a", &[])];
        let mut checked = outcome("a", true);
        checked.validation = Validation::StaticAnalysisOnly;
        checked.test_results.clear();
        let outcomes = [("a".to_owned(), checked)].into();
        let result = JobResult::assemble(&meta(), &specs, &outcomes, integration(vec![]), 5_000);
        assert_eq!(result.status, JobStatus::Succeeded);
        assert_eq!(result.validation, Validation::StaticAnalysisOnly);
        assert!(!result.all_tests_passed && result.manual_review_recommended);
    }

    #[test]
    fn a_job_ended_early_keeps_only_code_that_passed_and_says_why() {
        let specs = [spec("a", &[]), spec("b", &[]), spec("c", &[])];
        let mut running = outcome("b", false);
        running.done = false;
        running.failure = None;
        let outcomes = [
            ("a".to_owned(), outcome("a", true)),
            ("b".to_owned(), running),
        ]
        .into();
        let ending = Ending::Early {
            status: JobStatus::Cancelled,
            reason: "cancelled by its tenant".into(),
        };
        let result = JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000);
        assert_eq!(result.status, JobStatus::Cancelled);
        assert_eq!(result.failure.as_deref(), Some("cancelled by its tenant"));
        assert_eq!(result.implementations.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            result.test_results,
            vec![verdict("a", true)],
            "finished functions only"
        );
        assert_eq!(result.validation, Validation::NotValidated);
        assert!(!result.all_tests_passed && result.documentation.is_empty());
        assert_eq!(
            result.metrics.model_calls, 3,
            "the plan's and both functions'"
        );
    }

    #[test]
    fn a_cached_result_answers_with_its_own_id_and_nothing_spent() {
        let specs = [spec("a", &[])];
        let outcomes = [("a".to_owned(), outcome("a", true))].into();
        let ending = integration(vec![verdict("a", true)]);
        let cached = JobResult::assemble(&meta(), &specs, &outcomes, ending, 5_000);
        let id = TaskId::new();
        let answer = JobResult::from_cache(cached.clone(), id);
        assert_eq!(answer.job_id, id);
        assert_eq!(answer.metrics.cache, CacheOutcome::Hit);
        assert_eq!(
            (answer.metrics.model_calls, answer.metrics.total_ms),
            (0, 0)
        );
        assert_eq!(answer.implementations, cached.implementations);
    }
}
