//! Plan: the model splits the request into function specifications; the worker checks and
//! orders them (`flow::plan`), asks again in place when they are refused, then starts the job:
//! the plan stored and its first functions published.

use model::Phase;
use model::prompts::{self};
use proto::Progress;
use proto::generation::FunctionSpecs;
use proto::job::{JobMeta, JobStatus, PlanTask};

use super::{Error, Pipeline, TaskCtx, advancing, model_error};

impl Pipeline {
    /// Asks the model for function specifications until a plan is accepted (or refused
    /// [`flow::MAX_REPLANS`] times more), then starts the job on it.
    pub async fn plan(&self, ctx: &TaskCtx, task: &PlanTask) -> Result<(), Error> {
        let job = task.job_id;
        let mut seat = self.seat_ahead(ctx);
        let view = seat.alongside(self.view(ctx, None)).await?;
        let mut meta = view.meta.expect("view checks the meta");
        if let Some(plan) = view.plan {
            // Taken again after the plan was stored: publish what the first run did not.
            drop(seat);
            return self.started(ctx, &meta, &plan).await;
        }
        // The status and the event are written while the model plans: both are stored before
        // anything that follows the plan (the join waits for them). The call is polled first,
        // so its request leaves before the writes: the longer wait starts first.
        // Only over `queued`: a second run of this task (its first worker stalled) must not
        // write `planning` over a job the first one started meanwhile.
        let queued = matches!(view.status, None | Some(JobStatus::Queued));
        let planning = async {
            if queued {
                let _ = self.jobs.set_status(job, JobStatus::Planning).await;
            }
        };
        // A request that wrote its functions' stubs is planned by them, with no model call.
        if let Some(plan) = request_plan(&meta) {
            drop(seat);
            tokio::join!(planning, self.progress(job, Progress::Planning));
            tracing::info!(%job, functions = plan.specs.len(), "planned by the request's own stubs");
            return self.started(ctx, &meta, &plan).await;
        }
        let model = self.model();
        let mut problem = task.problem.clone();
        let first_answer = async {
            let model = model.clone().map_err(Error::Failed)?;
            seat.alongside(self.go_on(ctx)).await?;
            let mut seat = seat.take().await;
            self.ask_plan(ctx, model, &mut seat, &meta, problem.as_deref())
                .await
        };
        let (mut answer, (), ()) = tokio::join!(
            first_answer,
            planning,
            self.progress(job, Progress::Planning)
        );
        // What planning spent: what earlier runs of this task recorded, plus every call of
        // this one, the answers that did not validate included.
        let (spent_before, calls_before) = (meta.plan_tokens, meta.plan_model_calls);
        let charge = |meta: &mut JobMeta| {
            let (calls, usage) = ctx.call.spent();
            meta.plan_tokens.prompt = spent_before.prompt + usage.prompt_tokens;
            meta.plan_tokens.completion = spent_before.completion + usage.completion_tokens;
            meta.plan_model_calls = calls_before + calls;
        };
        loop {
            let generated = match answer {
                Ok(generated) => generated,
                // The model is down: hand the task back; the delivery limit bounds the waiting.
                Err(
                    e @ (Error::Retry { .. } | Error::Ended(_) | Error::Stale(_) | Error::Stopped),
                ) => {
                    return Err(e);
                }
                Err(Error::Failed(reason)) => {
                    charge(&mut meta);
                    return self
                        .refuse(&meta, &format!("planning failed: {reason}"), &[])
                        .await;
                }
                // Only a replan stops at the budget: the refused plan's reason and why it was
                // not asked again.
                Err(Error::Budget(reason)) => {
                    charge(&mut meta);
                    let refused = problem.unwrap_or_default();
                    let reason =
                        format!("the plan was rejected: {refused}; not asked again: {reason}");
                    return self.refuse(&meta, &reason, &[]).await;
                }
            };
            charge(&mut meta);
            let specs = generated.value.functions;
            let checked = match &meta.request.rework {
                Some(rework) => rework_plan(&specs, &rework.code)
                    .and_then(|()| flow::plan(specs.clone(), 1).map_err(|e| e.to_string())),
                None => flow::plan(specs.clone(), meta.max_functions as usize)
                    .map_err(|e| e.to_string()),
            };
            match checked {
                Ok(plan) => return self.started(ctx, &meta, &plan).await,
                Err(refused) if meta.replans < flow::MAX_REPLANS => {
                    meta.replans += 1;
                    // Kept before the next call: a retry of this task counts this replan and
                    // charges what planning spent so far.
                    self.jobs.put_job_meta(&meta).await.map_err(super::redis)?;
                    tracing::info!(%job, problem = %refused, "plan refused; asking for another");
                    let replanning = Progress::Replanning {
                        problem: refused.to_string(),
                    };
                    self.progress(job, replanning).await;
                    problem = Some(refused.to_string());
                    answer = match model.clone() {
                        Ok(model) => match self.may_ask(ctx).await {
                            Err(e @ Error::Budget(_)) => Err(e),
                            Err(e) => return Err(e),
                            Ok(()) => {
                                let mut seat = self.seat_ahead(ctx).take().await;
                                self.ask_plan(ctx, model, &mut seat, &meta, problem.as_deref())
                                    .await
                            }
                        },
                        Err(e) => Err(Error::Failed(e)),
                    };
                }
                Err(refused) => {
                    let reason = format!("the plan was rejected: {refused}");
                    return self.refuse(&meta, &reason, &specs).await;
                }
            }
        }
    }

    /// One call for a plan; `problem`: why the one before was refused.
    async fn ask_plan(
        &self,
        ctx: &TaskCtx,
        model: &model::Model,
        seat: &mut model::Seat,
        meta: &JobMeta,
        problem: Option<&str>,
    ) -> Result<model::Generated<FunctionSpecs>, Error> {
        let mut prompt = match &meta.request.rework {
            Some(rework) => prompts::plan_rework(&super::rework_prompt(&meta.request, rework)),
            None => prompts::plan(&prompts::PlanContext {
                instruction: &meta.request.instruction,
                language: meta.request.language.as_str(),
                constraints: meta.request.constraints.as_deref(),
            }),
        }
        .map_err(|e| Error::Failed(e.to_string()))?;
        if let Some(problem) = problem {
            prompt.user.push_str(&format!(
                "\n\nAn earlier plan for this request was rejected: {problem}. Fix that."
            ));
        }
        model
            .generate_in::<FunctionSpecs>(
                &ctx.call,
                seat,
                Phase::Plan,
                None,
                &prompt,
                self.deadline(),
            )
            .await
            .map_err(|e| model_error(None, &e))
    }

    /// Starts the job on `plan`: stored, its first functions published.
    async fn started(
        &self,
        ctx: &TaskCtx,
        meta: &JobMeta,
        plan: &proto::job::Plan,
    ) -> Result<(), Error> {
        // Charged before its functions start: their budget counts what planning spent.
        self.charge_rest(ctx).await;
        let status = self.flow.start(meta, plan).await.map_err(advancing)?;
        ctx.seen(status)
    }

    /// Ends the job failed with `reason`, before any function ran; `specs`: the plan refused.
    /// The refusal is stored as the job's plan (`Plan::refused`): should a second run of this
    /// task (its first worker stalled) have stored an accepted plan first, that one stands and
    /// the job goes on; should the second run come later, it finds this refusal.
    async fn refuse(
        &self,
        meta: &JobMeta,
        reason: &str,
        specs: &[proto::generation::FunctionSpec],
    ) -> Result<(), Error> {
        let refused = proto::job::Plan::refused(specs.to_vec(), reason.to_owned());
        self.flow.start(meta, &refused).await.map_err(advancing)?;
        Ok(())
    }
}

/// The plan of a generation request that wrote its functions' stubs (`crate::stubs`), when
/// they make one (`flow::plan`'s rules, the job's function limit); else the model plans.
fn request_plan(meta: &JobMeta) -> Option<proto::job::Plan> {
    if meta.request.rework.is_some() {
        return None;
    }
    let stubs = crate::stubs::of_request(meta.request.language, &meta.request.instruction)?;
    match flow::plan(stubs.specs, meta.max_functions as usize) {
        Ok(mut plan) => {
            plan.request_code = Some(stubs.code);
            Some(plan)
        }
        Err(refused) => {
            tracing::info!(job = %meta.id, %refused, "the request's stubs make no plan; the model plans");
            None
        }
    }
}

/// A `debug` or `refactor` plan names one function, with no dependencies, that the given code
/// defines (its cases call it in that code).
fn rework_plan(specs: &[proto::generation::FunctionSpec], code: &str) -> Result<(), String> {
    let [spec] = specs else {
        return Err(format!(
            "it has {} functions; a debug or refactor plan names exactly one, the function its cases call",
            specs.len()
        ));
    };
    if !spec.dependencies.is_empty() {
        return Err(format!("{} has dependencies; it must have none", spec.name));
    }
    let defined = code.match_indices(spec.name.as_str()).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + spec.name.len()..].trim_start().chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && matches!(after, Some('(' | '<'))
    });
    if !defined {
        return Err(format!("the given code has no function {}", spec.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, dependencies: &[&str]) -> proto::generation::FunctionSpec {
        serde_json::from_value(
            serde_json::json!({"name": name, "purpose": "p", "inputs": [],
            "outputs": {"type": "int", "description": "d"}, "dependencies": dependencies,
            "complexity": "simple"}),
        )
        .unwrap()
    }

    #[test]
    fn a_rework_plan_names_one_function_of_the_given_code() {
        let code = "def mean(xs):\n    return sum(xs) / len(xs)\n";
        assert_eq!(rework_plan(&[spec("mean", &[])], code), Ok(()));
        assert!(
            rework_plan(&[spec("median", &[])], code)
                .unwrap_err()
                .contains("no function median")
        );
        assert!(rework_plan(&[spec("me", &[])], code).is_err());
        assert!(rework_plan(&[spec("mean", &["x"])], code).is_err());
        assert!(
            rework_plan(&[spec("mean", &[]), spec("mean2", &[])], code)
                .unwrap_err()
                .contains("2 functions")
        );
        assert!(rework_plan(&[], code).is_err());
    }
}
