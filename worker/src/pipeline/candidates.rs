//! Which of a function's candidate implementations a job keeps: the one that passes every
//! given case (the request's own examples, right by definition), then the most generated ones,
//! ties broken by how many candidates agree with it — behave alike on every case — as CodeT's
//! dual execution agreement has it (Chen et al., 2022), then the first asked.

use std::collections::BTreeMap;

use proto::generation::TestCase;

use super::cases::CaseRun;

/// The index in `runs` (each candidate's run of `tests`, in the order asked) of the one to
/// keep; `None` when there is none.
pub(super) fn best(tests: &[TestCase], runs: &[CaseRun]) -> Option<usize> {
    let given: Vec<&str> = tests
        .iter()
        .filter(|t| t.given)
        .map(|t| t.name.as_str())
        .collect();
    // What each candidate did on each case: its verdict and its value, as the harness saw it.
    let behaviour = |run: &CaseRun| -> Vec<(String, bool, String)> {
        let by_name: BTreeMap<&str, _> = run.results.iter().map(|r| (r.test.as_str(), r)).collect();
        tests
            .iter()
            .map(|t| match by_name.get(t.name.as_str()) {
                Some(r) => (
                    t.name.clone(),
                    r.passed,
                    format!("{}|{:?}", r.actual_output, r.error_kind),
                ),
                None => (t.name.clone(), false, String::new()),
            })
            .collect()
    };
    let behaviours: Vec<_> = runs.iter().map(behaviour).collect();
    let score = |i: usize| {
        let b = &behaviours[i];
        let passed = |name: &str| b.iter().any(|(n, p, _)| n == name && *p);
        let all_given = given.iter().all(|name| passed(name));
        let generated = b
            .iter()
            .filter(|(n, p, _)| *p && !given.contains(&n.as_str()))
            .count();
        let agreeing = behaviours.iter().filter(|other| *other == b).count();
        (all_given, generated, agreeing)
    };
    // The highest score; among equals the first asked (`max_by_key` keeps the last).
    (0..runs.len()).rev().max_by_key(|&i| score(i))
}

/// The generated cases of `tests` that no run of `runs` passing every given case passes: every
/// implementation the request's own examples accept disagrees with them, so they are taken
/// for the model's mistakes (CodeT's consensus), not the code's. None when no candidate
/// passes every given case (nothing to judge them by) or there are no given cases.
pub(super) fn unconfirmed(tests: &[TestCase], runs: &[CaseRun]) -> Vec<String> {
    let passed = |run: &CaseRun, name: &str| run.results.iter().any(|r| r.test == name && r.passed);
    let accepted: Vec<&CaseRun> = runs
        .iter()
        .filter(|run| {
            tests
                .iter()
                .filter(|t| t.given)
                .all(|t| passed(run, &t.name))
        })
        .collect();
    if accepted.is_empty() || !tests.iter().any(|t| t.given) {
        return Vec::new();
    }
    tests
        .iter()
        .filter(|t| !t.given && !accepted.iter().any(|run| passed(run, &t.name)))
        .map(|t| t.name.clone())
        .collect()
}

/// The tests of a function whose request gave `given` cases, with `generated` ones beside them:
/// a generated case that contradicts a given one (the same inputs, another expectation) is
/// dropped, as is one whose name a given case has. Returns the tests (the given first) and
/// what was dropped.
pub(super) fn merged(
    given: &[TestCase],
    generated: Vec<TestCase>,
) -> (Vec<TestCase>, Vec<TestCase>) {
    let mut tests = given.to_vec();
    let mut dropped = Vec::new();
    for case in generated {
        let clash = given.iter().any(|g| {
            g.name == case.name
                || (g.inputs == case.inputs
                    && (g.expected_output != case.expected_output
                        || g.expected_error != case.expected_error))
        });
        if clash {
            dropped.push(case);
        } else {
            tests.push(TestCase {
                given: false,
                ..case
            });
        }
    }
    (tests, dropped)
}

#[cfg(test)]
mod tests {
    use proto::generation::TestKind;
    use proto::job::TestResult;
    use serde_json::{Value, json};

    use super::*;

    fn test(name: &str, given: bool) -> TestCase {
        TestCase {
            name: name.into(),
            kind: TestKind::Normal,
            inputs: serde_json::Map::new(),
            expected_output: json!(1),
            expected_error: None,
            given,
        }
    }

    /// A run whose cases gave `values` (1 passes every case).
    fn run(values: &[(&str, i64)]) -> CaseRun {
        let results: Vec<TestResult> = values
            .iter()
            .map(|(name, value)| TestResult {
                function: "f".into(),
                test: (*name).into(),
                passed: *value == 1,
                actual_output: Value::from(*value),
                error: None,
                error_kind: None,
                duration_ms: 0.0,
            })
            .collect();
        CaseRun {
            passed: results.iter().all(|r| r.passed),
            results,
            ..CaseRun::default()
        }
    }

    #[test]
    fn the_given_cases_come_first_then_the_generated_then_agreement_then_order() {
        let tests = [test("g", true), test("a", false), test("b", false)];
        // 0 fails the given case though it passes both generated ones; 1 and 2 pass it.
        let runs = [
            run(&[("g", 0), ("a", 1), ("b", 1)]),
            run(&[("g", 1), ("a", 1), ("b", 0)]),
            run(&[("g", 1), ("a", 0), ("b", 1)]),
        ];
        assert_eq!(best(&tests, &runs), Some(1), "ties keep the first asked");
        // A third candidate that behaves as 2 does: 2 is agreed on.
        let runs = [
            run(&[("g", 1), ("a", 1), ("b", 0)]),
            run(&[("g", 1), ("a", 0), ("b", 1)]),
            run(&[("g", 1), ("a", 0), ("b", 1)]),
        ];
        assert_eq!(best(&tests, &runs), Some(1));
        // Passing more generated cases beats agreement.
        let runs = [
            run(&[("g", 1), ("a", 0), ("b", 2)]),
            run(&[("g", 1), ("a", 0), ("b", 2)]),
            run(&[("g", 1), ("a", 1), ("b", 1)]),
        ];
        assert_eq!(best(&tests, &runs), Some(2));
        assert_eq!(best(&tests, &[]), None);
    }

    #[test]
    fn a_generated_case_that_contradicts_a_given_one_is_dropped() {
        let with = |name: &str, x: i64, expected: i64, given: bool| TestCase {
            inputs: json!({"x": x}).as_object().unwrap().clone(),
            expected_output: json!(expected),
            ..test(name, given)
        };
        let given = [with("given_1", 2, 4, true)];
        let (tests, dropped) = merged(
            &given,
            vec![
                with("double_two", 2, 5, false),
                with("double_three", 3, 6, false),
                with("given_1", 9, 18, false),
                with("same_as_given", 2, 4, false),
            ],
        );
        let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["given_1", "double_three", "same_as_given"]);
        assert!(tests[0].given && !tests[1].given);
        let names: Vec<&str> = dropped.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["double_two", "given_1"]);
    }

    #[test]
    fn generated_cases_no_candidate_the_given_ones_accept_passes_are_unconfirmed() {
        let tests = [
            test("g", true),
            test("a", false),
            test("b", false),
            test("c", false),
        ];
        let runs = [
            // Fails the given case: what it passes confirms nothing.
            run(&[("g", 0), ("a", 1), ("b", 1), ("c", 0)]),
            run(&[("g", 1), ("a", 1), ("b", 0), ("c", 0)]),
            run(&[("g", 1), ("a", 0), ("b", 0), ("c", 0)]),
        ];
        assert_eq!(unconfirmed(&tests, &runs), ["b", "c"]);
        // No candidate passes the given case: nothing is judged.
        let runs = [run(&[("g", 0), ("a", 1), ("b", 0), ("c", 0)])];
        assert!(unconfirmed(&tests, &runs).is_empty());
        // No given case: the generated ones are all there is.
        let generated = [test("a", false), test("b", false)];
        let runs = [run(&[("a", 1), ("b", 0)])];
        assert!(unconfirmed(&generated, &runs).is_empty());
    }

    #[test]
    fn without_given_cases_the_generated_and_agreement_decide() {
        let tests = [test("a", false), test("b", false)];
        let runs = [
            run(&[("a", 2), ("b", 3)]),
            run(&[("a", 5), ("b", 1)]),
            run(&[("a", 5), ("b", 1)]),
            run(&[("a", 1), ("b", 7)]),
        ];
        // 1, 2 and 3 pass one case each; 1 and 2 agree.
        assert_eq!(best(&tests, &runs), Some(1));
    }
}
