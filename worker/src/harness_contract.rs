//! The contract between the pipeline and the image's test harness: the runner runs
//! `harness.run_in_process` in its own interpreter for the pipeline's cases and integration
//! runs (`Pipeline::run_harness`): the worker writes the request and reads the report with
//! `proto::harness`'s types. These tests run the real harness with the host's Python on
//! requests the worker's types wrote, and check every field the worker reads against what it
//! answers.

mod tests {
    //! The contract with the drivers and the image's harness, checked by running them with
    //! the host's Python: every field the Rust types read must be one the programs print.

    use std::io::Read;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use proto::generation::TestKind;
    use proto::harness::{
        CasesReport, CasesRequest, CoverageCase, HarnessCase, HarnessRequest, IntegrateRequest,
        IntegrationReport, ManyCasesReport,
    };
    use serde_json::{Value, json};

    /// A case of `f(x)`.
    fn case(name: &str, x: Value, expected: Value) -> HarnessCase {
        HarnessCase {
            name: name.into(),
            kind: TestKind::Normal,
            inputs: json!({ "x": x }).as_object().unwrap().clone(),
            expected_output: expected,
            expected_error: None,
        }
    }

    /// `function`'s `cases` (against `code`, in a shared run).
    fn cases_of(
        function: Option<&str>,
        code: Option<&str>,
        cases: Vec<HarnessCase>,
    ) -> CasesRequest {
        CasesRequest {
            function: function.map(str::to_owned),
            code: code.map(str::to_owned),
            cases,
            case_timeout_ms: 2000,
            max_output_bytes: 4096,
            nonce: None,
        }
    }

    /// The request as the runner sends it to the harness.
    fn written(request: &HarnessRequest) -> String {
        serde_json::to_string(request).unwrap()
    }

    fn python() -> &'static str {
        // An absolute path: `python3` on PATH may be a shim that costs a quarter second.
        ["/usr/bin/python3", "/usr/local/bin/python3"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("python3")
    }

    /// How long a driver may take: a run of a second or so, which only a case the harness
    /// failed to stop (one that loops forever) would wait out, on any machine.
    const WITHIN: Duration = Duration::from_secs(120);

    /// Runs `driver` in a fresh directory holding `files`; its stdout. Fails if the driver
    /// has not ended `WITHIN`.
    fn run(driver: &str, files: &[(&str, String)]) -> String {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let harness_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox-images/common");
        let mut child = Command::new(python())
            .arg("-c")
            .arg(format!("MARKER = {MARKER:?}\n{driver}"))
            .current_dir(dir.path())
            .env("CODEGEN_HARNESS_DIR", harness_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                pipe.read_to_end(&mut bytes).unwrap();
                bytes
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        let deadline = Instant::now() + WITHIN;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("the driver still ran after {WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
        assert!(status.success(), "{}", String::from_utf8_lossy(&stderr));
        String::from_utf8(stdout).unwrap()
    }

    /// Every key of `ours` (a type read and written back) is in `theirs` (what was printed),
    /// at every depth: serde would read a renamed optional field as absent, not as an error.
    fn assert_fields_printed(ours: &Value, theirs: &Value, path: &str) {
        match (ours, theirs) {
            (Value::Object(ours), Value::Object(theirs)) => {
                for (key, value) in ours {
                    let Some(printed) = theirs.get(key) else {
                        panic!("{path}.{key} is read by the worker but not printed: {theirs:?}");
                    };
                    assert_fields_printed(value, printed, &format!("{path}.{key}"));
                }
            }
            (Value::Array(ours), Value::Array(theirs)) => {
                for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
                    assert_fields_printed(a, b, &format!("{path}[{i}]"));
                }
            }
            _ => {}
        }
    }

    /// Prints, after a marker, what the runner's harness mode answers for the spec in
    /// `request.json` and the module in `module.py` (the runner calls `run_in_process` so,
    /// the namespace left to the harness for cases and integration).
    const DRIVER: &str = "import json, os, sys\n\
        sys.path.insert(0, os.environ['CODEGEN_HARNESS_DIR'])\n\
        import harness\n\
        spec = json.load(open('request.json'))\n\
        report = harness.run_in_process(spec, open('module.py').read())\n\
        print(MARKER + json.dumps(report))\n";
    const MARKER: &str = "@@report@@ ";

    fn answered(stdout: &str) -> Value {
        let line = stdout.lines().rev().find_map(|l| l.strip_prefix(MARKER));
        serde_json::from_str(line.expect("a report line")).unwrap()
    }

    fn read<T: serde::de::DeserializeOwned>(stdout: &str) -> T {
        serde_json::from_value(answered(stdout)).expect("the report reads as the worker's type")
    }

    #[test]
    fn the_cases_report_is_what_the_harness_answers() {
        // The demo under `if __name__ == "__main__":` must not run: cases load the module as
        // `solution`, not as the program.
        let module = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x * 2\n\nif __name__ == '__main__':\n    raise SystemExit('the demo ran')\n";
        let request = written(&HarnessRequest::Cases(cases_of(
            Some("f"),
            None,
            vec![
                case("ok", json!(2), json!(4)),
                case("wrong", json!(3), json!(7)),
                case("raises", json!(-1), json!(0)),
            ],
        )));
        let stdout = run(
            DRIVER,
            &[
                ("module.py", module.to_owned()),
                ("request.json", request.clone()),
            ],
        );
        let report: CasesReport = read(&stdout);
        let verdicts: Vec<_> = report
            .cases
            .iter()
            .map(|c| (c.name.as_str(), c.passed, c.error_kind.map(|k| k.as_str())))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("ok", true, None),
                ("wrong", false, Some("wrong_output")),
                ("raises", false, Some("runtime")),
            ]
        );
        assert!(!report.passed);
        assert_fields_printed(
            &serde_json::to_value(&report).unwrap(),
            &answered(&stdout),
            "cases report",
        );

        // A module that does not load: the load error's fields.
        let stdout = run(
            DRIVER,
            &[
                ("module.py", "def f(:\n".to_owned()),
                ("request.json", request.clone()),
            ],
        );
        let report: CasesReport = read(&stdout);
        assert_eq!(report.error_kind, Some(proto::ErrorKind::Syntax));
        assert!(report.error.is_some() && report.cases.is_empty());
        assert_fields_printed(
            &serde_json::to_value(&report).unwrap(),
            &answered(&stdout),
            "load error report",
        );
    }

    #[test]
    fn the_many_cases_report_is_what_the_harness_answers() {
        // Two functions of one job in one run, each in its own module: the first rebinds a
        // builtin as it loads, and the second still finds the real one.
        let run_of = |code: &str, function: &str, cases: Vec<HarnessCase>| {
            cases_of(Some(function), Some(code), cases)
        };
        let request = written(&HarnessRequest::ManyCases {
            runs: vec![
                run_of(
                    "import builtins\nbuiltins.len = lambda x: 99\ndef f(x):\n    return len(x)\n",
                    "f",
                    vec![case("c", json!([1, 2]), json!(99))],
                ),
                run_of(
                    "def g(x):\n    return len(x)\n",
                    "g",
                    vec![
                        case("c", json!([1, 2]), json!(2)),
                        case("c", json!([]), json!(1)),
                    ],
                ),
                run_of("def h(:\n", "h", vec![case("c", json!(1), json!(1))]),
            ],
        });
        let stdout = run(
            DRIVER,
            &[
                ("module.py", String::new()),
                ("request.json", request.clone()),
            ],
        );
        let report: ManyCasesReport = read(&stdout);
        let verdicts: Vec<Vec<bool>> = report
            .runs
            .iter()
            .map(|r| r.cases.iter().map(|c| c.passed).collect())
            .collect();
        assert_eq!(verdicts, vec![vec![true], vec![true, false], vec![]]);
        assert_eq!(report.runs[2].error_kind, Some(proto::ErrorKind::Syntax));
        assert_fields_printed(
            &serde_json::to_value(&report).unwrap(),
            &answered(&stdout),
            "many cases report",
        );
    }

    #[test]
    fn the_integration_report_is_what_the_harness_answers() {
        let module = "import subprocess\n\ndef f(x):\n    \"\"\"Doubles.\"\"\"\n    if x:\n        return 2 * x\n    return 0\n\ndef g():\n    return subprocess.run(['true'])\n\ndef spin(x):\n    while True:\n        pass\n";
        let coverage = |x: i64| CoverageCase {
            inputs: json!({ "x": x }).as_object().unwrap().clone(),
        };
        let request = written(&HarnessRequest::Integrate(IntegrateRequest {
            verdicts: [(
                "f".to_owned(),
                cases_of(
                    None,
                    None,
                    vec![case("c", json!(1), json!(2)), case("c", json!(2), json!(5))],
                ),
            )]
            .into(),
            cases: [
                ("f".to_owned(), vec![coverage(1)]),
                ("spin".to_owned(), vec![coverage(0)]),
            ]
            .into(),
            case_timeout_ms: 300,
            lint: true,
        }));
        // The looping case stops adding coverage at its timeout instead of holding the run:
        // without it, the run never ends and `run` fails after `WITHIN`.
        let stdout = run(
            DRIVER,
            &[
                ("module.py", module.to_owned()),
                ("request.json", request.clone()),
            ],
        );
        let report: IntegrationReport = read(&stdout);
        let verdicts: Vec<bool> = report.functions["f"]
            .cases
            .iter()
            .map(|c| c.passed)
            .collect();
        assert_eq!(
            verdicts,
            vec![true, false],
            "verdicts only for the functions asked"
        );
        assert_eq!(report.functions.len(), 1);
        let quality = &report.quality;
        assert_eq!(quality.complexity.get("f"), Some(&2));
        assert!((quality.docstrings - 1.0 / 3.0).abs() < 1e-9, "{quality:?}");
        assert!(quality.dangerous_calls.contains(&"subprocess".to_owned()));
        assert!(
            quality.coverage > 0.0 && quality.coverage < 1.0,
            "{quality:?}"
        );
        // The linter's findings, or `warnings` unmeasured where this interpreter has no
        // pycodestyle and pyflakes (the images have them: sandbox-images/python's tests).
        match &quality.warnings {
            Some(warnings) => assert!(
                warnings.iter().any(|w| w.starts_with("line 9: E302")),
                "{warnings:?}"
            ),
            None => assert!(quality.unmeasured.contains(&"warnings".to_owned())),
        }
        assert_fields_printed(
            &serde_json::to_value(&report).unwrap(),
            &answered(&stdout),
            "integration report",
        );
    }
}
