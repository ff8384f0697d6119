//! Implement one function: tests from the model, then code, run against them in the sandbox,
//! repaired from the evidence until they pass or the attempts run out.

use std::collections::BTreeSet;
use std::time::Instant;

use model::prompts::{self, Attempt, DependencyCode, Failure};
use model::{Completion, Generated, Phase, Seat};
use proto::generation::{Implementation, TestCase, TestCases};
use proto::job::{
    FunctionOutcome, ImplementTask, Improvement, JobMeta, Plan, RequestCode, ReworkMode,
    ReworkOutcome, TestResult, Validation,
};
use proto::{ErrorKind, Progress};

use crate::gate::Dependency;

use super::candidates;
use super::cases::CaseRun;
use super::seat_ahead::SeatAhead;
use super::{Error, Pipeline, TaskCtx, advancing, model_error, redis};

impl Pipeline {
    /// Dependencies of `function`, transitively, in plan order (each before its users).
    fn dependencies(plan: &Plan, function: &str) -> Vec<String> {
        let mut needed = BTreeSet::new();
        let mut stack = vec![function.to_owned()];
        while let Some(name) = stack.pop() {
            if let Some(spec) = plan.spec(&name) {
                for dep in &spec.dependencies {
                    if needed.insert(dep.clone()) {
                        stack.push(dep.clone());
                    }
                }
            }
        }
        plan.specs
            .iter()
            .filter(|s| needed.contains(&s.name))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Tests, implementation, runs and repairs for one function.
    pub async fn implement(&self, ctx: &TaskCtx, task: &ImplementTask) -> Result<(), Error> {
        let job = task.job_id;
        let function = task.function.clone();
        // The tests' call waits for the model's limit while the job is read.
        let mut seat = self.seat_ahead(ctx);
        let view = seat.alongside(self.view(ctx, Some(&function))).await?;
        let meta = view.meta.expect("view checks the meta");
        let plan = view
            .plan
            .ok_or_else(|| Error::Stale(format!("job {job} has no plan")))?;
        let spec = plan
            .spec(&function)
            .cloned()
            .ok_or_else(|| Error::Stale(format!("{function} is not in the plan of job {job}")))?;
        if let Some(existing) = view.function
            && existing.done
        {
            // Taken again after its outcome was stored: publish what the run that stored it did
            // not. Its place under the model's limit goes back before anything else is written.
            drop(seat);
            return self
                .flow
                .resume_function(&meta, &plan, &existing, view.status)
                .await
                .map_err(advancing);
        }
        // Verified code of the dependencies, in plan order.
        let mut dependency_code = Vec::new();
        let dependencies = Self::dependencies(&plan, &function);
        let outcomes = seat
            .alongside(self.jobs.functions(job, &dependencies))
            .await
            .map_err(redis)?;
        for (dep, outcome) in dependencies.into_iter().zip(outcomes) {
            match outcome.and_then(|o| o.code.filter(|_| o.passed)) {
                Some(code) => dependency_code.push((dep, code)),
                None => {
                    // Never by the plan's ordering; if it happens, the job fails with the
                    // reason instead of waiting for this function forever.
                    drop(seat);
                    let reason =
                        format!("{function} was started before its dependency {dep} passed");
                    let mut failed = FunctionOutcome::new(&function);
                    failed.done = true;
                    failed.failure = Some(reason);
                    return self.finished(ctx, &meta, &plan, &failed, None).await;
                }
            }
        }
        let cache_key = self.cache.as_ref().map(|(_, model)| {
            proto::job::function_cache_key(
                meta.request.language,
                &spec,
                &dependency_code,
                model,
                meta.request.rework.as_ref(),
                plan.request_code.as_ref(),
            )
        });
        if let (Some((cache, _)), Some(key)) = (&self.cache, &cache_key) {
            match seat.alongside(cache.look_up_function(key)).await {
                Ok(Some(mut cached)) => {
                    drop(seat);
                    cached.cached = true;
                    cached.name = function.clone();
                    // Not stored when another run finished first: that outcome stands.
                    let event = Progress::FunctionCached {
                        function: function.clone(),
                    };
                    return self
                        .finished(ctx, &meta, &plan, &cached, Some(&event))
                        .await;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "function cache unavailable"),
            }
        }
        let started = Instant::now();
        let mut outcome = FunctionOutcome::new(&function);
        let last_attempt = match self
            .implement_loop(
                ctx,
                seat,
                &meta,
                &spec,
                plan.request_code.as_ref(),
                &dependency_code,
                &mut outcome,
            )
            .await
        {
            // Infrastructure failed mid-way: the partial outcome stays, the task comes back.
            // Or the job ended: nothing more is stored by this one.
            // Or the worker stops: the task goes back with what it stored.
            Err(e @ (Error::Retry { .. } | Error::Ended(_) | Error::Stopped)) => return Err(e),
            // Another run of the task finished the function: nothing more is stored by this
            // one, which publishes what that run may not have.
            Err(stale @ Error::Stale(_)) => {
                self.resume_standing(&meta, &plan, &function).await?;
                return Err(stale);
            }
            Err(Error::Failed(reason)) => {
                outcome.failure = Some(reason);
                None
            }
            // The job's budget is spent: the function ends with its best attempt.
            Err(Error::Budget(reason)) => {
                outcome.failure = Some(reason);
                outcome.stopped_by = Some(proto::job::StoppedBy::Budget);
                None
            }
            Ok(event) => Some(event),
        };
        // Charged what every call of this run spent, the answers that did not validate (and
        // a failure's last ones) included, not only what the answers it used reported.
        let (calls, usage) = ctx.call.spent();
        outcome.model_calls = calls;
        outcome.tokens.prompt = usage.prompt_tokens;
        outcome.tokens.completion = usage.completion_tokens;
        outcome.done = true;
        outcome.generation_ms = u64::try_from(started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_sub(outcome.execution_ms);
        let tested = outcome.passed && outcome.validation == Validation::Tested;
        // Cached in the same round trip as it is stored and announced: the cache's write is
        // polled first, so on the one connection it is also sent first. (When another run's
        // outcome stands, this one is verified all the same.)
        let cached = async {
            if let (Some((cache, _)), Some(key), true) = (&self.cache, &cache_key, tested)
                && let Err(e) = cache.put_cached_function(key, &outcome).await
            {
                tracing::warn!(error = %e, "cannot cache a verified function");
            }
        };
        // The passing attempt's event goes with the final outcome, and the function's
        // completion with both: one write, then the publish of what it made ready.
        let finishing = self.finished(ctx, &meta, &plan, &outcome, last_attempt.as_ref());
        tokio::join!(cached, finishing, self.charge_rest(ctx)).1
    }

    /// Stores `outcome`, the function's final one, with `attempt`, completes the function and
    /// publishes what that made ready (`flow::Flow::finish_function`).
    async fn finished(
        &self,
        ctx: &TaskCtx,
        meta: &JobMeta,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
    ) -> Result<(), Error> {
        let (job, function) = (meta.id, &outcome.name);
        let finished = self
            .flow
            .finish_function(meta, plan, outcome, attempt)
            .await
            .map_err(advancing)?;
        if !finished.stored {
            tracing::info!(%job, %function, "another run of this function finished first; its outcome stands");
            return self.resume_standing(meta, plan, function).await;
        }
        ctx.seen(finished.status)?;
        tracing::info!(%job, %function, passed = outcome.passed, attempts = outcome.attempts, "function finished");
        Ok(())
    }

    /// Publishes what the completion of `function` released, when another run of its task
    /// stored its final outcome first: that run may have stopped before publishing, with its
    /// delivery already handed to this one, so nobody else would (`flow`'s published set
    /// keeps it to what is missing).
    async fn resume_standing(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        function: &str,
    ) -> Result<(), Error> {
        let view = self
            .jobs
            .view(meta.id, Some(function))
            .await
            .map_err(redis)?;
        match view.function {
            Some(standing) if standing.done => self
                .flow
                .resume_function(meta, plan, &standing, view.status)
                .await
                .map_err(advancing),
            _ => Ok(()),
        }
    }

    /// Fills `outcome`; `Err(Failed)` carries a failure reason for the record. `Ok` carries
    /// the passing attempt's progress event, not yet stored: it is stored with the final
    /// outcome (failed attempts are stored as they happen).
    /// `request`: the request's own code, when its stubs are the plan.
    #[allow(clippy::too_many_arguments)] // the task's context and what the function is made of
    async fn implement_loop(
        &self,
        ctx: &TaskCtx,
        mut seat: SeatAhead<'_>,
        meta: &JobMeta,
        spec: &proto::generation::FunctionSpec,
        request: Option<&RequestCode>,
        dependency_code: &[(String, String)],
        outcome: &mut FunctionOutcome,
    ) -> Result<Progress, Error> {
        let job = meta.id;
        let language = meta.request.language.as_str();
        let model = self.model().map_err(Error::Failed)?;
        let deadline = self.deadline();
        let rework = meta.request.rework.as_ref();
        let tests_prompt = match rework {
            Some(rework) => prompts::tests_rework(&prompts::ReworkTestsContext {
                rework: super::rework_prompt(&meta.request, rework),
                spec,
                min_cases: self.options.min_cases,
                max_cases: self.options.max_cases,
                not_reproduced: Vec::new(),
            }),
            None => prompts::tests(&prompts::TestsContext {
                instruction: &meta.request.instruction,
                language,
                spec,
                test_requirements: meta.request.test_requirements.as_deref(),
                min_cases: self.options.min_cases,
                max_cases: self.options.max_cases,
            }),
        }
        .map_err(|e| Error::Failed(e.to_string()))?;
        seat.alongside(self.may_ask(ctx)).await?;
        // The `function_started` event is written while the model writes the tests: it only
        // has to be stored before the tests are (both finish before they are saved).
        let started_event = self.progress(
            job,
            Progress::FunctionStarted {
                function: spec.name.clone(),
                worker: self.worker.clone(),
            },
        );
        // The request's own examples are the tests when it gave some, and with one candidate
        // no generated ones are asked for (a generated case could only fail right code, at a
        // call's cost); with several, generated cases rank them, those that contradict a given
        // one dropped. Otherwise the model writes them. The code's call follows the tests' in
        // the same seat: one wait for the limit.
        let candidates = if rework.is_none() {
            meta.request.candidates.max(1)
        } else {
            1
        };
        let given = request
            .and_then(|r| r.given.get(&spec.name))
            .filter(|g| !g.is_empty() && rework.is_none());
        let mut seat = match given {
            Some(given) if candidates == 1 => {
                outcome.tests = given.clone();
                tokio::join!(seat.take(), started_event).0
            }
            _ => {
                let tests = async {
                    let mut seat = seat.take().await;
                    // Beside the request's own cases, generated ones only rank candidates:
                    // an invalid answer is not asked again.
                    let tests = match given {
                        Some(_) => {
                            model
                                .generate_optional_in::<TestCases>(
                                    &ctx.call,
                                    &mut seat,
                                    Phase::Tests,
                                    Some(&spec.name),
                                    &tests_prompt,
                                    deadline,
                                )
                                .await
                        }
                        None => {
                            model
                                .generate_in::<TestCases>(
                                    &ctx.call,
                                    &mut seat,
                                    Phase::Tests,
                                    Some(&spec.name),
                                    &tests_prompt,
                                    deadline,
                                )
                                .await
                        }
                    };
                    (tests, seat)
                };
                // The call first: its request leaves before the event's write.
                let (tests, seat) = tokio::join!(tests, started_event).0;
                match (
                    tests.map_err(|e| model_error(Some("writing tests"), &e)),
                    given,
                ) {
                    // The request's examples are tests enough: a model that cannot write
                    // more (its answers cut off, invalid) does not fail the function.
                    (Err(Error::Failed(reason)), Some(given)) => {
                        tracing::warn!(%job, function = %spec.name, %reason, "no generated cases: the given ones only");
                        outcome.tests = given.clone();
                    }
                    (Err(e), _) => return Err(e),
                    (Ok(tests), given) => {
                        account(outcome, &tests.usage, tests.calls);
                        account_tests(outcome, &tests.usage);
                        match given {
                            Some(given) => {
                                let (tests, dropped) = candidates::merged(given, tests.value.cases);
                                outcome.tests = tests;
                                outcome.contradicted = dropped;
                            }
                            None => outcome.tests = tests.value.cases,
                        }
                    }
                }
                seat
            }
        };
        if let Some(rework) = rework {
            self.against_given_code(ctx, &mut seat, meta, rework, spec, outcome)
                .await?;
        }
        // Stored while the model writes the code (a redelivery resumes from them); the code
        // waits for the write before anything else is stored.
        let mut unsaved_tests = Some(outcome.clone());
        let deps: Vec<DependencyCode<'_>> = dependency_code
            .iter()
            .map(|(name, code)| DependencyCode { name, code })
            .collect();
        // The request's preamble (its imports and the functions it implemented), then the
        // dependencies' verified code.
        let prelude: String = request
            .map(|r| r.preamble.as_str())
            .filter(|p| !p.trim().is_empty())
            .into_iter()
            .chain(dependency_code.iter().map(|(_, code)| code.as_str()))
            .map(|code| format!("{}\n\n\n", code.trim_end()))
            .collect();

        let mut last: Option<(String, CaseRun)> = None;
        // Repairs in a row that did not help (`Options::repair_patience`).
        let mut stalled = 0;
        for attempt in 1..=meta.request.max_iterations {
            outcome.attempts = attempt;
            // A repair is shown the tenant's nearest lessons; the failure it repairs (the
            // history's last entry) names them.
            let found = match &last {
                Some((code, run)) => {
                    self.recall(meta, &spec.name, &outcome.tests, code, run)
                        .await
                }
                None => Vec::new(),
            };
            if let Some(previous) = outcome.history.last_mut() {
                previous.lessons = found.iter().map(|f| f.lesson.id.clone()).collect();
            }
            let lessons: Vec<&proto::lesson::Lesson> = found.iter().map(|f| &f.lesson).collect();
            let prompt = match (&last, rework) {
                (None, Some(rework)) => {
                    let given = outcome.rework.as_ref();
                    prompts::implement_rework(&prompts::ReworkImplementContext {
                        rework: super::rework_prompt(&meta.request, rework),
                        spec,
                        tests: &outcome.tests,
                        failing: given
                            .map(|g| g.reproduced.iter().map(String::as_str).collect())
                            .unwrap_or_default(),
                    })
                }
                // A stub the request wrote: asked as one plain call would ask it.
                (None, None) if request.is_some() => prompts::complete(&prompts::CompleteContext {
                    language,
                    code: request.map_or("", |r| r.code.as_str()),
                }),
                (None, None) => prompts::implement(&prompts::ImplementContext {
                    instruction: &meta.request.instruction,
                    language,
                    spec,
                    dependencies: deps.clone(),
                    tests: &outcome.tests,
                }),
                // A stub the request wrote: repaired as plainly, its failing examples shown.
                (Some((code, run)), None) if request.is_some() => {
                    let mut failures = failures(&outcome.tests, &run.results);
                    failures.truncate(PLAIN_REPAIR_FAILURES);
                    prompts::complete_repair(&prompts::CompleteRepairContext {
                        language,
                        code: request.map_or("", |r| r.code.as_str()),
                        attempt: &shortened(code, PLAIN_REPAIR_ATTEMPT_BYTES),
                        error: &run.error,
                        failures,
                        lessons: lessons.clone(),
                    })
                }
                (Some((code, run)), _) => {
                    let failures = failures(&outcome.tests, &run.results);
                    let history: Vec<Attempt<'_>> = outcome
                        .history
                        .iter()
                        .filter(|h| !h.fix.is_empty())
                        .map(|h| Attempt {
                            attempt: h.attempt,
                            error_kind: h.error_kind.as_str(),
                            fix: &h.fix,
                        })
                        .collect();
                    prompts::repair(&prompts::RepairContext {
                        instruction: &meta.request.instruction,
                        language,
                        spec,
                        dependencies: deps.clone(),
                        code,
                        attempt: attempt - 1,
                        error_kind: run.error_kind.map_or("failed", ErrorKind::as_str),
                        error: &run.error,
                        failures,
                        history,
                        lessons,
                    })
                }
            }
            .map_err(|e| Error::Failed(e.to_string()))?;
            let phase = if last.is_none() {
                Phase::Implement
            } else {
                Phase::Repair
            };
            self.may_ask(ctx).await?;
            let plain = rework.is_none() && request.is_some();
            // The first attempt asks for every candidate at once (one call with `n` where the
            // server samples several); all run against the tests in one sandbox run, and the
            // best is the attempt's code.
            let n = if last.is_none() { candidates } else { 1 };
            let generating = self.ask_code(
                ctx, model, &mut seat, plain, phase, spec, &prompt, n, deadline,
            );
            // A failed save (Redis, the job ended, another run finished) stops the call.
            let generated = match unsaved_tests.take() {
                Some(with_tests) => {
                    tokio::try_join!(self.save(ctx, &with_tests, None), generating)?.1
                }
                None => generating.await?,
            };
            // Given back before the run: a repair waits for the limit again.
            seat = Seat::default();
            let mut codes = Vec::with_capacity(generated.len());
            for generated in generated {
                account(outcome, &generated.usage, generated.calls);
                codes.push(generated.value.code);
                // A rework's result says why the code changed: the analysis that came with
                // the code that stands (a rework asks for one answer).
                if let (Some(given), Some(analysis)) =
                    (outcome.rework.as_mut(), generated.value.analysis.as_ref())
                {
                    given.analysis = Some(analysis.clone());
                }
                if let (Some(analysis), Some(previous)) =
                    (generated.value.analysis, outcome.history.last_mut())
                {
                    previous.fix = analysis.changes.clone();
                    previous.analysis = Some(analysis);
                }
            }
            let modules: Vec<String> = codes.iter().map(|c| format!("{prelude}{c}")).collect();
            let ran = match &modules[..] {
                [module] => self
                    .run_cases(ctx, meta.request.language, module, spec, &outcome.tests)
                    .await
                    .map(|mut run| {
                        let runs = [run.clone()];
                        leave_out_unconfirmed(job, spec, outcome, &mut run, &runs);
                        (0, run)
                    }),
                _ => self
                    .run_candidates(ctx, meta.request.language, &modules, spec, &outcome.tests)
                    .await
                    .map(|mut runs| {
                        let best = candidates::best(&outcome.tests, &runs).unwrap_or(0);
                        tracing::info!(%job, function = %spec.name, candidates = runs.len(), best, "candidates judged by the tests");
                        let mut run = runs.swap_remove(best);
                        runs.push(run.clone());
                        leave_out_unconfirmed(job, spec, outcome, &mut run, &runs);
                        (best, run)
                    }),
            };
            let chosen = ran.as_ref().map_or(0, |(i, _)| *i);
            let code = codes.swap_remove(chosen);
            let module = modules[chosen].clone();
            // The outcome holds the best attempt so far (its code with its verdicts): what
            // the function ends with when its attempts or the job's budget run out.
            let before = outcome.code.is_some().then(|| {
                let ran_cases = !outcome.test_results.is_empty();
                (standing(&outcome.tests, &outcome.test_results), ran_cases)
            });
            let best = before.is_none_or(|(before, _)| {
                ran.as_ref()
                    .is_ok_and(|(_, run)| standing(&outcome.tests, &run.results) >= before)
            });
            let previous = outcome.code.replace(code.clone());
            let run = match ran.map(|(_, run)| run) {
                Ok(run) => run,
                Err(Error::Retry {
                    dependency: Dependency::Docker,
                    reason,
                }) if self.options.static_fallback
                    // The static checks read Python; other languages wait for a sandbox, and
                    // so does a rework (its cases must run on the given code first).
                    && super::forms::of(meta.request.language).is_none()
                    && rework.is_none()
                    && self.sandbox.health().await.is_err() =>
                {
                    tracing::warn!(%job, function = %spec.name, %reason, "no sandbox: static checks only");
                    match crate::static_check::check(&module, Some((&spec.name, spec.inputs.len())))
                    {
                        Ok(_) => {
                            outcome.validation = Validation::StaticAnalysisOnly;
                            outcome.passed = true;
                            outcome.test_results.clear();
                            return Ok(Progress::Attempt {
                                function: spec.name.clone(),
                                attempt,
                                passed: true,
                                error_kind: None,
                                validation: Some(Validation::StaticAnalysisOnly),
                                worker: self.worker.clone(),
                            });
                        }
                        Err(problem) => CaseRun {
                            passed: false,
                            results: vec![],
                            error_kind: Some(ErrorKind::Syntax),
                            error: problem,
                            duration_ms: 0,
                            cpu_ms: 0,
                        },
                    }
                }
                Err(e) => return Err(e),
            };
            outcome.execution_ms += run.duration_ms;
            outcome.cpu_ms += run.cpu_ms;
            if best {
                outcome.test_results = run.results.clone();
            } else {
                outcome.code = previous;
            }
            // The attempt's event is stored with the outcome it describes.
            let event = Progress::Attempt {
                function: spec.name.clone(),
                attempt,
                passed: run.passed,
                error_kind: run.error_kind,
                validation: None,
                worker: self.worker.clone(),
            };
            self.count_uses(meta, &spec.name, &found, run.passed).await;
            if run.passed {
                outcome.passed = true;
                if let Some((before, failed)) = &last {
                    let analysis = outcome
                        .history
                        .last()
                        .and_then(|h| h.analysis.as_ref())
                        .map(|a| {
                            if a.root_cause.trim().is_empty() {
                                a.changes.clone()
                            } else {
                                a.root_cause.clone()
                            }
                        })
                        .unwrap_or_default();
                    outcome.learned = self
                        .learn(
                            meta,
                            &spec.name,
                            &outcome.tests,
                            before,
                            failed,
                            &code,
                            &analysis,
                        )
                        .await;
                }
                return Ok(event);
            }
            outcome.history.push(Improvement {
                function: spec.name.clone(),
                attempt,
                error_kind: run.error_kind.unwrap_or(ErrorKind::Runtime),
                error: run.error.clone(),
                fix: String::new(),
                analysis: None,
                lessons: Vec::new(),
            });
            // A repair helped when it passed more cases than the best attempt before it, or
            // ran cases where that one could not (a syntax or import error fixed).
            let helped = before.is_none_or(|(before, ran_cases)| {
                standing(&outcome.tests, &run.results) > before
                    || (!ran_cases && !run.results.is_empty())
            });
            stalled = if helped { 0 } else { stalled + 1 };
            let patience = self.options.repair_patience;
            if patience > 0 && stalled >= patience && attempt < meta.request.max_iterations {
                outcome.stopped_by = Some(proto::job::StoppedBy::NoProgress);
                self.save(ctx, outcome, Some(event)).await?;
                return Err(Error::Failed(format!(
                    "tests still fail after {attempt} attempts, the last {stalled} passing no more \
                     cases than the one before them (repair_patience {patience}; {}): {}",
                    run.error_kind.map_or("failed", ErrorKind::as_str),
                    run.error
                )));
            }
            self.save(ctx, outcome, Some(event)).await?;
            last = Some((code, run));
        }
        let (_, run) = last.unwrap_or_default();
        Err(Error::Failed(format!(
            "tests still fail after {} attempts ({}): {}",
            meta.request.max_iterations,
            run.error_kind.map_or("failed", ErrorKind::as_str),
            run.error
        )))
    }
}

impl Pipeline {
    /// A rework's cases, run on the given code before anything changes it. `debug`: at least
    /// one must fail there (it reproduces the error); when none does, the model is asked once
    /// more, told so, and then the job fails: a fix that no test shows is not verified.
    /// `refactor`: the cases the given code fails do not describe what it does and are left
    /// out; none left fails the job.
    async fn against_given_code(
        &self,
        ctx: &TaskCtx,
        seat: &mut Seat,
        meta: &JobMeta,
        rework: &proto::job::Rework,
        spec: &proto::generation::FunctionSpec,
        outcome: &mut FunctionOutcome,
    ) -> Result<(), Error> {
        let language = meta.request.language;
        for asked in 1..=2 {
            let run = self
                .run_cases(ctx, language, &rework.code, spec, &outcome.tests)
                .await?;
            outcome.execution_ms += run.duration_ms;
            outcome.cpu_ms += run.cpu_ms;
            let failing: Vec<String> = outcome
                .tests
                .iter()
                .filter(|t| !run.results.iter().any(|r| r.test == t.name && r.passed))
                .map(|t| t.name.clone())
                .collect();
            match rework.mode {
                ReworkMode::Refactor => {
                    outcome.tests.retain(|t| !failing.contains(&t.name));
                    if outcome.tests.is_empty() {
                        return Err(Error::Failed(format!(
                            "no characterisation case passes on the given code ({}): {}",
                            run.error_kind.map_or("failed", ErrorKind::as_str),
                            run.error
                        )));
                    }
                    outcome.rework = Some(ReworkOutcome {
                        dropped: failing,
                        ..ReworkOutcome::default()
                    });
                    return Ok(());
                }
                ReworkMode::Debug if !failing.is_empty() => {
                    outcome.rework = Some(ReworkOutcome {
                        reproduced: failing,
                        ..ReworkOutcome::default()
                    });
                    return Ok(());
                }
                ReworkMode::Debug if asked == 2 => break,
                ReworkMode::Debug => {}
            }
            // Every case passed on the code with the error: ask again, saying so.
            let names: Vec<&str> = outcome.tests.iter().map(|t| t.name.as_str()).collect();
            let prompt = prompts::tests_rework(&prompts::ReworkTestsContext {
                rework: super::rework_prompt(&meta.request, rework),
                spec,
                min_cases: self.options.min_cases,
                max_cases: self.options.max_cases,
                not_reproduced: names,
            })
            .map_err(|e| Error::Failed(e.to_string()))?;
            self.may_ask(ctx).await?;
            let model = self.model().map_err(Error::Failed)?;
            let tests = model
                .generate_in::<TestCases>(
                    &ctx.call,
                    seat,
                    Phase::Tests,
                    Some(&spec.name),
                    &prompt,
                    self.deadline(),
                )
                .await
                .map_err(|e| model_error(Some("writing tests"), &e))?;
            account(outcome, &tests.usage, tests.calls);
            account_tests(outcome, &tests.usage);
            outcome.tests = tests.value.cases;
        }
        Err(Error::Failed(format!(
            "the error was not reproduced: every case written for {} passes on the given code",
            spec.name
        )))
    }
}

fn account(outcome: &mut FunctionOutcome, usage: &model::Usage, calls: u32) {
    outcome.tokens.prompt += usage.prompt_tokens;
    outcome.tokens.completion += usage.completion_tokens;
    outcome.model_calls += calls;
}

/// Leaves out of `outcome`'s tests (and `run`'s verdicts, one of `runs`) the generated cases
/// no implementation that passes every given case passes ([`candidates::unconfirmed`]):
/// listed with the contradicted ones rather than repaired against.
fn leave_out_unconfirmed(
    job: proto::TaskId,
    spec: &proto::generation::FunctionSpec,
    outcome: &mut FunctionOutcome,
    run: &mut CaseRun,
    runs: &[CaseRun],
) {
    let unconfirmed = candidates::unconfirmed(&outcome.tests, runs);
    if unconfirmed.is_empty() {
        return;
    }
    tracing::info!(%job, function = %spec.name, ?unconfirmed, "generated cases no implementation the given ones accept passes: left out");
    let (kept, dropped): (Vec<TestCase>, Vec<TestCase>) = std::mem::take(&mut outcome.tests)
        .into_iter()
        .partition(|t| !unconfirmed.contains(&t.name));
    outcome.tests = kept;
    outcome.contradicted.extend(dropped);
    run.results.retain(|r| !unconfirmed.contains(&r.test));
    run.passed = run.results.len() == outcome.tests.len() && run.results.iter().all(|r| r.passed);
    if run.passed {
        (run.error_kind, run.error) = (None, String::new());
    }
}

fn account_tests(outcome: &mut FunctionOutcome, usage: &model::Usage) {
    outcome.test_tokens.prompt += usage.prompt_tokens;
    outcome.test_tokens.completion += usage.completion_tokens;
}

/// How good an attempt is: the given cases it passed, then all the cases it passed.
fn standing(tests: &[TestCase], results: &[TestResult]) -> (usize, usize) {
    let passed = |r: &&TestResult| r.passed;
    let given = results
        .iter()
        .filter(passed)
        .filter(|r| tests.iter().any(|t| t.given && t.name == r.test))
        .count();
    (given, results.iter().filter(passed).count())
}

fn failures<'a>(tests: &'a [TestCase], results: &'a [TestResult]) -> Vec<Failure<'a>> {
    results
        .iter()
        .filter(|r| !r.passed)
        .filter_map(|r| {
            let case = tests.iter().find(|t| t.name == r.test)?;
            Some(Failure {
                name: &case.name,
                inputs: &case.inputs,
                expected_output: &case.expected_output,
                expected_error: case.expected_error.as_deref(),
                actual_output: Some(&r.actual_output),
                error: r.error.as_deref(),
            })
        })
        .collect()
}

impl Pipeline {
    /// `n` answers of code for `spec`: asked as a plain call (`plain`: the request's own stub,
    /// a first attempt) or in the implementation's JSON form.
    #[allow(clippy::too_many_arguments)] // one call's context, spelled out
    async fn ask_code(
        &self,
        ctx: &TaskCtx,
        model: &model::Model,
        seat: &mut Seat,
        plain: bool,
        phase: Phase,
        spec: &proto::generation::FunctionSpec,
        prompt: &model::Prompt,
        n: u32,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Generated<Implementation>>, Error> {
        let function = Some(spec.name.as_str());
        let generated = if plain {
            model
                .generate_n_in::<Completion>(&ctx.call, seat, phase, function, prompt, n, deadline)
                .await
                .map(|answers| answers.into_iter().map(completed).collect())
        } else {
            model
                .generate_n_in::<Implementation>(
                    &ctx.call, seat, phase, function, prompt, n, deadline,
                )
                .await
        };
        generated.map_err(|e| model_error(Some(phase.as_str()), &e))
    }
}

/// Failing cases a plain repair shows (a weak model's window is small, and the first few say
/// what is wrong).
const PLAIN_REPAIR_FAILURES: usize = 3;

/// The most of the failed completion a plain repair shows: a function of its size, not the
/// thousand tokens of a weak model's runaway answer, which the repair's prompt would pay for
/// again and which tells it nothing more (measured: `bench/quality`, BENCHMARKS.md).
const PLAIN_REPAIR_ATTEMPT_BYTES: usize = 1_600;

/// `code` cut at a line's end to at most `limit` bytes, saying how many lines were left out.
fn shortened(code: &str, limit: usize) -> String {
    if code.len() <= limit {
        return code.to_owned();
    }
    let mut kept = 0;
    for line in code.split_inclusive('\n') {
        if kept + line.len() > limit {
            break;
        }
        kept += line.len();
    }
    let left_out = code[kept..].lines().count();
    format!("{}... ({left_out} more lines left out)\n", &code[..kept])
}

/// A plain call's code as an implementation (a plain answer has no analysis).
fn completed(generated: Generated<Completion>) -> Generated<Implementation> {
    let Generated {
        value,
        usage,
        calls,
        answers,
        elapsed,
    } = generated;
    Generated {
        value: Implementation {
            code: value.code,
            analysis: None,
        },
        usage,
        calls,
        answers,
        elapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::shortened;

    #[test]
    fn a_long_attempt_is_cut_at_a_line_and_says_what_it_left_out() {
        assert_eq!(
            shortened("def f():\n    return 1\n", 100),
            "def f():\n    return 1\n"
        );
        let runaway = "x = 1\n".repeat(10);
        assert_eq!(
            shortened(&runaway, 13),
            "x = 1\nx = 1\n... (8 more lines left out)\n"
        );
    }
}
