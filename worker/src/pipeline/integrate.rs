//! Integrate: assemble the module, run every test together, measure quality, store the
//! result and finish the job.

use std::collections::BTreeMap;

use proto::job::{
    CacheOutcome, JobMeta, JobMetrics, JobResult, JobStatus, JobTask, Plan, Validation,
};
use proto::now_ms;

use super::quality::{score, static_quality};
use super::{Error, Pipeline, redis};

impl Pipeline {
    /// Assembles the module, runs every test together, reports quality, stores the result.
    pub async fn integrate(&self, task: &JobTask) -> Result<(), Error> {
        let job = task.job_id;
        // One read: the job, its result (there only on a redelivery) and every outcome.
        let read = self.jobs.integration_view(job).await.map_err(redis)?;
        let view = Self::checked(job, read.view)?;
        let meta = view.meta.expect("checked has the meta");
        let plan = view
            .plan
            .ok_or_else(|| Error::Drop(format!("job {job} has no plan")))?;
        if read.result.is_some() {
            return Ok(()); // a redelivery: the job has its result
        }
        let mut functions = read.functions;
        let outcomes: BTreeMap<String, _> = plan
            .specs
            .iter()
            .filter_map(|s| Some((s.name.clone(), functions.remove(&s.name)?)))
            .collect();
        let module: String = plan
            .specs
            .iter()
            .filter_map(|s| outcomes.get(&s.name).and_then(|o| o.code.clone()))
            .map(|code| format!("{}\n\n\n", code.trim_end()))
            .collect();
        let all_passed_before = plan
            .specs
            .iter()
            .all(|s| outcomes.get(&s.name).is_some_and(|o| o.passed));
        let static_only = outcomes
            .values()
            .any(|o| o.validation == Validation::StaticAnalysisOnly);
        let mut test_results = Vec::new();
        let mut execution_ms: u64 = outcomes.values().map(|o| o.execution_ms).sum();
        let mut sandbox_cpu_ms: u64 = outcomes.values().map(|o| o.cpu_ms).sum();
        let quality = if static_only {
            // Nothing was run, so nothing is re-run: the result says it is untested.
            static_quality(&module, &outcomes)
        } else {
            // One run: every function against the whole module (catches interference between
            // them) when each passed alone, and the quality analysis.
            let run = self
                .integration_run(&module, &outcomes, all_passed_before)
                .await?;
            execution_ms += run.duration_ms;
            sandbox_cpu_ms += run.cpu_ms;
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
            score(run.report, &test_results)
        };
        let all_tests_passed = !static_only
            && all_passed_before
            && !test_results.is_empty()
            && test_results.iter().all(|r| r.passed);
        let failure = plan
            .specs
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
                (!static_only && !all_tests_passed)
                    .then(|| "tests fail when the module is assembled".into())
            });
        let mut tokens = meta.plan_tokens;
        let mut model_calls = meta.plan_model_calls;
        let mut generation_ms = 0;
        for o in outcomes.values() {
            tokens.prompt += o.tokens.prompt;
            tokens.completion += o.tokens.completion;
            model_calls += o.model_calls;
            generation_ms += o.generation_ms;
        }
        let status = if failure.is_none() {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        };
        let result = JobResult {
            job_id: job,
            status,
            instruction: meta.request.instruction.clone(),
            language: meta.request.language,
            function_specs: plan.specs.clone(),
            implementations: outcomes
                .iter()
                .filter_map(|(n, o)| o.code.clone().map(|c| (n.clone(), c)))
                .collect(),
            tests: outcomes
                .iter()
                .map(|(n, o)| (n.clone(), o.tests.clone()))
                .collect(),
            test_results,
            all_tests_passed,
            improvement_history: plan
                .specs
                .iter()
                .filter_map(|s| outcomes.get(&s.name))
                .flat_map(|o| o.history.iter().cloned())
                .collect(),
            documentation: documentation(&meta, &plan),
            quality,
            metrics: JobMetrics {
                generation_ms,
                execution_ms,
                sandbox_cpu_ms,
                total_ms: now_ms().saturating_sub(meta.submitted_at_ms),
                model_calls,
                tokens,
                cache: CacheOutcome::Miss,
            },
            failure,
            webhook: None,
            validation: if static_only {
                Validation::StaticAnalysisOnly
            } else {
                Validation::Tested
            },
            manual_review_recommended: static_only || status != JobStatus::Succeeded,
        };
        // Result, `finished` event and final status in one step: whoever finishes first (this
        // run, a duplicate of it, or a coordinator failing the job) is the job's end. A
        // succeeded result is cached in the same round trip (if a duplicate finished first,
        // the cache holds this run's result: verified as well, for the same request).
        let finishing = self.jobs.finish_job(job, meta.tenant.as_deref(), &result);
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
        if let Some(usage) = &self.usage {
            usage.charge(
                meta.tenant.as_deref(),
                &proto::api::UsageTotals::of_job(&result).fields(),
            );
        }
        if let Some(histogram) = &self.job_seconds {
            histogram
                .with_label_values(&[status.as_str()])
                .observe(result.metrics.total_ms as f64 / 1000.0);
        }
        // The finish script ended the job: no event is needed, the coordinators have nothing
        // left to do for it.
        tracing::info!(%job, status = status.as_str(), "job finished");
        Ok(())
    }
}

/// Markdown documentation from the plan: what each function does, how to call it.
fn documentation(meta: &JobMeta, plan: &Plan) -> String {
    let mut doc = format!("# Solution\n\n{}\n", meta.request.instruction);
    for spec in &plan.specs {
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
    }
    doc
}
