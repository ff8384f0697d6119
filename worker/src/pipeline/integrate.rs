//! Integrate: assemble the module, run every test together, measure quality, store the
//! result and finish the job.

use std::collections::BTreeMap;

use proto::ending::{Ending, Integration};
use proto::job::{IntegrateTask, JobResult, JobStatus, Validation};
use proto::now_ms;

use super::quality::{score, static_quality};
use super::{Error, Pipeline, TaskCtx, redis};
use proto::generation::FunctionSpec;
use proto::job::{Change, FunctionOutcome, JobRequest, Rework, ReworkMode, TestResult};

impl Pipeline {
    /// Assembles the module, runs every test together, reports quality, stores the result.
    pub async fn integrate(&self, ctx: &TaskCtx, task: &IntegrateTask) -> Result<(), Error> {
        let job = task.job_id;
        // One read: the job, its result (there only on a redelivery) and every outcome.
        let read = self.jobs.integration_view(job).await.map_err(redis)?;
        let view = Self::checked(ctx, read.view)?;
        let meta = view.meta.expect("checked has the meta");
        let plan = view
            .plan
            .ok_or_else(|| Error::Stale(format!("job {job} has no plan")))?;
        if read.result.is_some() {
            return Ok(()); // a redelivery: the job has its result
        }
        let mut functions = read.functions;
        let outcomes: BTreeMap<String, _> = plan
            .specs
            .iter()
            .filter_map(|s| Some((s.name.clone(), functions.remove(&s.name)?)))
            .collect();
        // The request's preamble, then the functions: two blank lines between them and one
        // newline at the end, as PEP 8 has it (the linter reads this module).
        let module = Some(plan.preamble())
            .filter(|p| !p.trim().is_empty())
            .into_iter()
            .chain(
                plan.specs
                    .iter()
                    .filter_map(|s| outcomes.get(&s.name).and_then(|o| o.code.as_deref())),
            )
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n\n\n")
            + "\n";
        let all_passed_before = plan
            .specs
            .iter()
            .all(|s| outcomes.get(&s.name).is_some_and(|o| o.passed));
        let static_only = outcomes
            .values()
            .any(|o| o.validation == Validation::StaticAnalysisOnly);
        let ending = if static_only {
            // Nothing was run, so nothing is re-run: the result says it is untested.
            Ending::Integrated(Integration {
                test_results: Vec::new(),
                quality: static_quality(&module, &outcomes),
                execution_ms: 0,
                sandbox_cpu_ms: 0,
            })
        } else {
            // One run: every function against the whole module (catches interference between
            // them) when each passed alone, and the quality analysis.
            match self
                .integration_run(
                    ctx,
                    meta.request.language,
                    &module,
                    &plan.specs,
                    &outcomes,
                    all_passed_before,
                )
                .await
            {
                Ok(run) => {
                    // A lesson whose code fails a case the request gave, in the module, goes.
                    for (name, verdict) in &run.verdicts {
                        let Some(outcome) = outcomes.get(name) else {
                            continue;
                        };
                        let given_failed = verdict.results.iter().any(|r| {
                            !r.passed && outcome.tests.iter().any(|t| t.name == r.test && t.given)
                        });
                        if let (Some(id), true) = (&outcome.learned, given_failed) {
                            self.unlearn(&meta, name, id).await;
                        }
                    }
                    let mut test_results = Vec::new();
                    for spec in &plan.specs {
                        match run.verdicts.get(&spec.name) {
                            Some(verdict) => test_results.extend(verdict.results.iter().cloned()),
                            None => {
                                if let Some(o) = outcomes.get(&spec.name) {
                                    test_results.extend(o.test_results.iter().cloned());
                                }
                            }
                        }
                    }
                    Ending::Integrated(Integration {
                        quality: proto::job::Quality {
                            warnings: run.warnings,
                            ..score(run.report, &test_results)
                        },
                        test_results,
                        execution_ms: run.duration_ms,
                        sandbox_cpu_ms: run.cpu_ms,
                    })
                }
                // The run cannot be made (the image's harness cannot run it): the job ends
                // failed, saying why, rather than waiting for its deadline.
                Err(Error::Failed(reason)) => Ending::Early {
                    status: JobStatus::Failed,
                    reason: format!("integration failed: {reason}"),
                },
                Err(e) => return Err(e),
            }
        };
        let mut result = JobResult::assemble(&meta, &plan.specs, &outcomes, ending, now_ms());
        result.plan_source = plan.source();
        if let Some(rework) = &meta.request.rework {
            result.change = Some(
                self.change(ctx, &meta.request, rework, &plan.specs, &outcomes, &result)
                    .await?,
            );
        }
        let status = result.status;
        // Result, `finished` event and final status in one step: whoever finishes first (this
        // run, a duplicate of it, or a coordinator failing the job) is the job's end. A
        // succeeded result is cached in the same round trip (if a duplicate finished first,
        // the cache holds this run's result: verified as well, for the same request).
        let finishing = self.flow.finish(meta.tenant.as_deref(), &result);
        let cached = async {
            if let (Some((cache, _)), Some(key), JobStatus::Succeeded, false) =
                (&self.cache, &meta.cache_key, status, static_only)
                && let Err(e) = cache.put_cached_solution(key, &result).await
            {
                tracing::warn!(error = %e, "cannot cache the solution");
            }
        };
        let finished = tokio::join!(finishing, cached).0.map_err(redis)?;
        if !finished {
            tracing::info!(%job, "the job had finished already; its result stands");
            return Ok(());
        }
        tracing::info!(%job, status = status.as_str(), "job finished");
        Ok(())
    }
}

impl Pipeline {
    /// What a `debug` or `refactor` job changed in the given code: the diff to the code that
    /// stands, the model's analysis of it, the cases that reproduced the error (`debug`) or
    /// were left out (`refactor`), and, for a refactor, the given code's quality by the same
    /// measures (a sandbox run of the given code with the same cases).
    async fn change(
        &self,
        ctx: &TaskCtx,
        request: &JobRequest,
        rework: &Rework,
        specs: &[FunctionSpec],
        outcomes: &BTreeMap<String, FunctionOutcome>,
        result: &JobResult,
    ) -> Result<Change, Error> {
        let spec = specs.first();
        let function = spec.map(|s| s.name.clone()).unwrap_or_default();
        let outcome = outcomes.get(&function);
        let given = outcome.and_then(|o| o.rework.clone()).unwrap_or_default();
        let changed = result.implementations.get(&function);
        let diff = changed.map_or_else(String::new, |code| {
            similar::TextDiff::from_lines(rework.code.as_str(), code.as_str())
                .unified_diff()
                .context_radius(3)
                .header("given", "changed")
                .to_string()
        });
        let quality_before = match (rework.mode, outcome) {
            (ReworkMode::Refactor, Some(outcome)) if changed.is_some() => {
                let run = self
                    .integration_run(ctx, request.language, &rework.code, specs, outcomes, false)
                    .await?;
                // Every case kept passed on the given code: that is why it was kept.
                let passed: Vec<TestResult> = outcome
                    .tests
                    .iter()
                    .map(|t| TestResult {
                        function: function.clone(),
                        test: t.name.clone(),
                        passed: true,
                        actual_output: t.expected_output.clone(),
                        error: None,
                        error_kind: None,
                        duration_ms: 0.0,
                    })
                    .collect();
                Some(proto::job::Quality {
                    warnings: run.warnings,
                    ..score(run.report, &passed)
                })
            }
            // Nothing changed, or no cases to score the given code by.
            (ReworkMode::Refactor, _) => None,
            // A fix is judged by the cases the given code failed, not by its quality before.
            (ReworkMode::Debug, _) => None,
        };
        let analysis = given.analysis;
        Ok(Change {
            mode: rework.mode.into(),
            function,
            diff,
            root_cause: analysis.as_ref().map(|a| a.root_cause.clone()),
            changes: analysis.map(|a| a.changes),
            reproducing_tests: given.reproduced,
            dropped_tests: given.dropped,
            goals: rework.goals.clone(),
            quality_before,
        })
    }
}
