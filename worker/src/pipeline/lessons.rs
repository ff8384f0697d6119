//! The pipeline's use of the memory (`memory`): the lessons a repair is shown, the lesson a
//! repair that worked leaves, each use counted by whether its repair passed. The memory
//! never fails a function: Redis unavailable for it is a repair without lessons (warned).

use memory::Found;
use memory::learn::{Case, Repair};
use memory::signature::FailedCase;
use proto::ErrorKind;
use proto::generation::TestCase;
use proto::job::{JobMeta, TestResult};
use proto::lesson::LessonSource;

use super::Pipeline;
use super::cases::CaseRun;

/// The first failing case of `run` among `tests`.
fn first_failure<'a>(
    tests: &'a [TestCase],
    results: &'a [TestResult],
) -> Option<(&'a TestCase, &'a TestResult)> {
    results
        .iter()
        .filter(|r| !r.passed)
        .find_map(|r| Some((tests.iter().find(|t| t.name == r.test)?, r)))
}

fn failed_case<'a>(case: &'a TestCase, result: &'a TestResult) -> FailedCase<'a> {
    FailedCase {
        expected_output: &case.expected_output,
        expected_error: case.expected_error.as_deref(),
        actual_output: Some(&result.actual_output),
        error: raised(result),
    }
}

/// What the case raised: nothing for a wrong answer (the harness's note of it is not an
/// exception; the answer's shape is the signature).
fn raised(result: &TestResult) -> Option<&str> {
    result
        .error
        .as_deref()
        .filter(|_| result.error_kind != Some(ErrorKind::WrongOutput))
}

fn kind(run: &CaseRun) -> ErrorKind {
    run.error_kind.unwrap_or(ErrorKind::Runtime)
}

impl Pipeline {
    /// The memory, when this job uses it.
    fn memory_for(&self, meta: &JobMeta) -> Option<&memory::Memory> {
        self.memory
            .as_ref()
            .filter(|m| m.is_on() && meta.request.memory.is_on())
    }

    /// The lessons the repair of `code`, which failed `run` against `tests`, is shown.
    pub(super) async fn recall(
        &self,
        meta: &JobMeta,
        function: &str,
        tests: &[TestCase],
        code: &str,
        run: &CaseRun,
    ) -> Vec<Found> {
        let Some(memory) = self.memory_for(meta) else {
            return Vec::new();
        };
        let failed = first_failure(tests, &run.results);
        let signature = memory::signature::signature(
            kind(run),
            &run.error,
            failed.map(|(case, result)| failed_case(case, result)),
        );
        let case = failed
            .map(|(case, result)| memory::learn::render_case(as_case(function, case, result)))
            .unwrap_or_default();
        let text = format!("{}\n{case}\n{code}", run.error);
        let query = memory::Query {
            language: meta.request.language,
            signature: &signature,
            text: &text,
        };
        match memory.nearest(meta.tenant.as_deref(), &query).await {
            Ok(found) => {
                if !found.is_empty() {
                    tracing::info!(job = %meta.id, %function, %signature, lessons = ?found.iter().map(|f| f.lesson.id.as_str()).collect::<Vec<_>>(), "repair shown lessons");
                }
                found
            }
            Err(e) => {
                tracing::warn!(job = %meta.id, %function, error = %e, "no lessons for this repair");
                Vec::new()
            }
        }
    }

    /// Counts that the repair shown `found` passed or not.
    pub(super) async fn count_uses(
        &self,
        meta: &JobMeta,
        function: &str,
        found: &[Found],
        passed: bool,
    ) {
        let Some(memory) = self.memory_for(meta).filter(|_| !found.is_empty()) else {
            return;
        };
        if let Err(e) = memory
            .used(meta.tenant.as_deref(), found, meta.id, function, passed)
            .await
        {
            tracing::warn!(job = %meta.id, %function, error = %e, "lesson uses not counted");
        }
    }

    /// Keeps the lesson of a repair that turned `before` (which failed `failed`) into the
    /// passing `after`; its id.
    #[allow(clippy::too_many_arguments)] // the repair, spelled out
    pub(super) async fn learn(
        &self,
        meta: &JobMeta,
        function: &str,
        tests: &[TestCase],
        before: &str,
        failed: &CaseRun,
        after: &str,
        analysis: &str,
    ) -> Option<String> {
        let memory = self.memory_for(meta)?;
        let case = first_failure(tests, &failed.results)
            .map(|(case, result)| as_case(function, case, result));
        let model = self
            .model
            .as_ref()
            .map(model::Model::describe)
            .unwrap_or_default();
        let repair = Repair {
            language: meta.request.language,
            error_kind: kind(failed),
            error: &failed.error,
            case,
            before,
            after,
            analysis,
            model: &model,
            job: meta.id,
            function,
            source: LessonSource::Repair,
            given: tests.iter().any(|t| t.given),
            now_ms: proto::now_ms(),
        };
        let lesson = memory::learn::lesson(&repair, memory.options().max_diff_bytes)?;
        match memory.learn(meta.tenant.as_deref(), &lesson).await {
            Ok(store::Added::Yes { .. } | store::Added::Already) => Some(lesson.id),
            Ok(store::Added::TooLarge) => None,
            Err(e) => {
                tracing::warn!(job = %meta.id, %function, error = %e, "lesson not kept");
                None
            }
        }
    }

    /// Removes lesson `id`: the code of its repair failed a case the request gave.
    pub(super) async fn unlearn(&self, meta: &JobMeta, function: &str, id: &str) {
        let Some(memory) = self.memory_for(meta) else {
            return;
        };
        match memory.forget(meta.tenant.as_deref(), id).await {
            Ok(removed) => {
                tracing::info!(job = %meta.id, %function, lesson = %id, removed, "lesson removed: its code failed a given case")
            }
            Err(e) => {
                tracing::warn!(job = %meta.id, %function, lesson = %id, error = %e, "lesson not removed")
            }
        }
    }
}

fn as_case<'a>(function: &'a str, case: &'a TestCase, result: &'a TestResult) -> Case<'a> {
    Case {
        function,
        inputs: &case.inputs,
        expected_output: &case.expected_output,
        expected_error: case.expected_error.as_deref(),
        actual_output: Some(&result.actual_output),
        error: raised(result),
    }
}
