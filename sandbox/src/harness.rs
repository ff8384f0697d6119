//! Harness runs: a [`HarnessRun`] as the runner executes it, and the harness's answer read as
//! the report of the mode asked.

use std::collections::BTreeMap;

use proto::harness::{HarnessReport, HarnessRequest, HarnessRun};
use proto::{ExecutionRequest, ExecutionResult};

use crate::Error;

/// What a harness run gave: the run's result, and the harness's report when it answered
/// (`None` when the run broke first: a timeout, the memory limit, a crash).
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessOutcome {
    pub result: ExecutionResult,
    pub report: Option<HarnessReport>,
}

/// The execution a harness run is: its module as the program, no stdin, files or test.
pub(crate) fn harness_execution(run: &HarnessRun) -> ExecutionRequest {
    ExecutionRequest {
        language: run.language,
        code: run.code.clone(),
        stdin: None,
        test: None,
        timeout_ms: run.timeout_ms,
        cpu_time_ms: None,
        compile_timeout_ms: None,
        memory_mb: run.memory_mb,
        fresh_container: false,
        files: BTreeMap::new(),
        return_files: Vec::new(),
    }
}

/// The outcome of `request`'s run: its raw report read as the mode's.
pub(crate) fn harness_outcome(
    request: &HarnessRequest,
    result: ExecutionResult,
    report: Option<serde_json::Value>,
) -> Result<HarnessOutcome, Error> {
    let report = report
        .map(|report| request.read_report(report))
        .transpose()
        .map_err(|e| Error::HarnessReport {
            mode: request.mode(),
            error: e.to_string(),
        })?;
    Ok(HarnessOutcome { result, report })
}

#[cfg(test)]
mod tests {
    use proto::harness::{CasesRequest, ManyCasesReport};
    use serde_json::json;

    use super::*;

    fn cases() -> HarnessRequest {
        HarnessRequest::Cases(CasesRequest {
            function: Some("f".into()),
            code: None,
            cases: vec![],
            case_timeout_ms: 100,
            max_output_bytes: 1024,
            nonce: None,
        })
    }

    #[test]
    fn a_report_is_read_as_the_mode_asked() {
        let report = json!({"passed": true, "cases": [], "error_kind": null, "error": null,
                            "traceback": null});
        let outcome = harness_outcome(
            &cases(),
            ExecutionResult::error(proto::Status::Passed, ""),
            Some(report),
        )
        .unwrap();
        assert!(
            matches!(outcome.report, Some(HarnessReport::Cases(ref r)) if r.passed),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_report_of_another_mode_is_an_error_naming_the_mode() {
        let report = serde_json::to_value(ManyCasesReport { runs: vec![] }).unwrap();
        let err = harness_outcome(
            &cases(),
            ExecutionResult::error(proto::Status::Passed, ""),
            Some(report),
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::HarnessReport { mode: "cases", .. }),
            "{err}"
        );
    }

    #[test]
    fn the_request_is_sent_with_its_mode_as_the_tag() {
        let sent = serde_json::to_value(cases()).unwrap();
        assert_eq!(sent["mode"], "cases");
        assert_eq!(sent["function"], "f");
        assert!(sent.get("code").is_none(), "{sent}");
        assert_eq!(sent["nonce"], serde_json::Value::Null);
    }
}
