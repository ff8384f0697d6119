//! Plan: the model splits the request into function specifications, stored for the
//! coordinator to check and order.

use model::Phase;
use model::prompts::{self};
use proto::Progress;
use proto::generation::FunctionSpecs;
use proto::job::{Event, JobStatus, PlanTask};

use super::{Error, Pipeline, TaskCtx, model_error, redis};

impl Pipeline {
    /// Asks the model for function specifications and stores them.
    pub async fn plan(&self, ctx: &TaskCtx, task: &PlanTask) -> Result<(), Error> {
        let job = task.job_id;
        let mut seat = self.seat_ahead(ctx);
        let view = seat.alongside(self.view(ctx, None)).await?;
        let mut meta = view.meta.expect("view checks the meta");
        if view.plan.is_some() {
            // Already planned (a redelivery): just say so again.
            drop(seat);
            return self
                .emit(Event::Planned {
                    job_id: job,
                    failure: None,
                })
                .await;
        }
        // The status and the event are written while the model plans: both are stored before
        // anything that follows the plan (the join waits for them). The call is polled first,
        // so its request leaves before the writes: the longer wait starts first.
        let planning = async {
            let _ = self.jobs.set_status(job, JobStatus::Planning).await;
        };
        let outcome = async {
            let model = self.model().map_err(Error::Failed)?;
            let mut prompt = prompts::plan(&prompts::PlanContext {
                instruction: &meta.request.instruction,
                language: meta.request.language.as_str(),
                constraints: meta.request.constraints.as_deref(),
            })
            .map_err(|e| Error::Failed(e.to_string()))?;
            if let Some(problem) = &task.problem {
                prompt.user.push_str(&format!(
                    "\n\nAn earlier plan for this request was rejected: {problem}. Fix that."
                ));
            }
            seat.alongside(self.go_on(ctx)).await?;
            let mut seat = seat.take().await;
            model
                .generate_in::<FunctionSpecs>(
                    &ctx.call,
                    &mut seat,
                    Phase::Plan,
                    None,
                    &prompt,
                    self.deadline(),
                )
                .await
                .map_err(|e| model_error(None, &e))
        };
        let (outcome, (), ()) =
            tokio::join!(outcome, planning, self.progress(job, Progress::Planning));
        match outcome {
            Ok(generated) => {
                meta.plan_tokens.prompt += generated.usage.prompt_tokens;
                meta.plan_tokens.completion += generated.usage.completion_tokens;
                meta.plan_model_calls += generated.calls;
                self.jobs
                    .save_specs_and_announce(
                        &meta,
                        &generated.value.functions,
                        &Event::Planned {
                            job_id: job,
                            failure: None,
                        },
                    )
                    .await
                    .map_err(redis)
            }
            // The model is down: hand the task back; the delivery limit bounds the waiting.
            Err(e @ (Error::Retry { .. } | Error::Ended(_) | Error::Stale(_))) => Err(e),
            Err(Error::Failed(reason)) => {
                self.emit(Event::Planned {
                    job_id: job,
                    failure: Some(reason),
                })
                .await
            }
        }
    }
}
