//! A request's own functions: when a request carries the stubs of the functions it wants (a
//! signature with its docstring, as HumanEval and MBPP write a problem), they are the plan, made
//! with no model call, and the examples they give (doctests, `assert f(x) == y`, `f(x) ==> y`)
//! are test cases marked `given`. Everything else the request's code holds (imports, functions
//! it implemented) is the preamble every module of the job starts with.

mod examples;
mod literals;
mod python;
mod signatures;
mod values;

use std::collections::BTreeMap;
use std::ops::Range;

use proto::Language;
use proto::generation::{FunctionSpec, TestCase};
use proto::job::RequestCode;

/// The plan a request's stubs make, and what comes with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stubs {
    /// In the request's order.
    pub specs: Vec<FunctionSpec>,
    pub code: RequestCode,
}

/// The stubs of `instruction` in `language`, or `None` when it carries none that can be the
/// plan (no code, code that does not parse, a stub whose parameters cannot be named): then
/// the model plans.
pub fn of_request(language: Language, instruction: &str) -> Option<Stubs> {
    match language {
        Language::Python | Language::PythonSci => python::stubs(instruction),
        _ => signatures::stubs(language, instruction),
    }
}

/// The stubs `specs` of a request's `code` (each with its documentation in `docs`, in order),
/// whose other code is `preamble`: each depends on the others its documentation calls, and the
/// examples its documentation gives are its given cases.
fn assembled(
    reader: &dyn examples::Reader,
    mut specs: Vec<FunctionSpec>,
    docs: &[String],
    preamble: &str,
    code: &str,
) -> Stubs {
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    for (spec, doc) in specs.iter_mut().zip(docs) {
        spec.dependencies = names
            .iter()
            .filter(|other| **other != spec.name && examples::calls(doc, other))
            .cloned()
            .collect();
    }
    let given = specs
        .iter()
        .zip(docs)
        .map(|(spec, doc)| (spec.name.clone(), examples::examples(reader, spec, doc)))
        .collect();
    let preamble = preamble.trim();
    Stubs {
        specs,
        code: RequestCode {
            preamble: if preamble.is_empty() {
                String::new()
            } else {
                format!("{preamble}\n")
            },
            code: code.trim_end().to_owned() + "\n",
            given: named(given),
        },
    }
}

/// `code` without the ranges `cut` (in order, apart).
fn without(code: &str, cut: &[Range<usize>]) -> String {
    let mut kept = String::new();
    let mut at = 0;
    for range in cut {
        kept.push_str(&code[at..range.start]);
        at = range.end;
    }
    kept.push_str(&code[at..]);
    kept
}

/// `given`'s cases by function, each named `given_<n>` in its function's order.
fn named(given: BTreeMap<String, Vec<TestCase>>) -> BTreeMap<String, Vec<TestCase>> {
    given
        .into_iter()
        .map(|(function, cases)| {
            let cases = cases
                .into_iter()
                .enumerate()
                .map(|(i, case)| TestCase {
                    name: format!("given_{}", i + 1),
                    ..case
                })
                .collect();
            (function, cases)
        })
        .filter(|(_, cases): &(String, Vec<TestCase>)| !cases.is_empty())
        .collect()
}
