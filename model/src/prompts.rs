//! Versioned prompt templates (minijinja). The version goes into cache keys: a change to any
//! template must bump [`PROMPT_VERSION`] and add a new folder under `prompts/`.

use minijinja::Environment;
use proto::generation::{FunctionSpec, TestCase};
use proto::job::ReworkMode;
use serde::Serialize;

use crate::Error;

/// The version of the templates in `prompts/v1/`.
pub const PROMPT_VERSION: &str = "v1";

const SYSTEM: &str = include_str!("../prompts/v1/system.j2");
const PLAN: &str = include_str!("../prompts/v1/plan.j2");
const TESTS: &str = include_str!("../prompts/v1/tests.j2");
const IMPLEMENT: &str = include_str!("../prompts/v1/implement.j2");
const REPAIR: &str = include_str!("../prompts/v1/repair.j2");
const PLAN_REWORK: &str = include_str!("../prompts/v1/plan_rework.j2");
const TESTS_REWORK: &str = include_str!("../prompts/v1/tests_rework.j2");
const IMPLEMENT_REWORK: &str = include_str!("../prompts/v1/implement_rework.j2");
const COMPLETE_SYSTEM: &str = include_str!("../prompts/v1/complete_system.j2");
const COMPLETE: &str = include_str!("../prompts/v1/complete.j2");
const COMPLETE_REPAIR: &str = include_str!("../prompts/v1/complete_repair.j2");
const AGENT_SYSTEM: &str = include_str!("../prompts/v1/agent_system.j2");
const AGENT_TASK: &str = include_str!("../prompts/v1/agent_task.j2");

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
}

/// Inputs of the planning prompt.
#[derive(Debug, Clone, Serialize)]
pub struct PlanContext<'a> {
    pub instruction: &'a str,
    pub language: &'a str,
    pub constraints: Option<&'a str>,
}

/// Verified code of a dependency.
#[derive(Debug, Clone, Serialize)]
pub struct DependencyCode<'a> {
    pub name: &'a str,
    pub code: &'a str,
}

/// Inputs of the test-writing prompt.
#[derive(Debug, Clone, Serialize)]
pub struct TestsContext<'a> {
    pub instruction: &'a str,
    pub language: &'a str,
    pub spec: &'a FunctionSpec,
    pub test_requirements: Option<&'a str>,
    pub min_cases: u32,
    pub max_cases: u32,
}

/// Inputs of the first implementation prompt.
#[derive(Debug, Clone, Serialize)]
pub struct ImplementContext<'a> {
    pub instruction: &'a str,
    pub language: &'a str,
    pub spec: &'a FunctionSpec,
    pub dependencies: Vec<DependencyCode<'a>>,
    pub tests: &'a [TestCase],
}

/// Inputs of the first implementation of a function whose stub the request wrote: the
/// request's own code (its imports, helpers and the stub), asked as a single plain call would
/// ask it, the answer a fenced block ([`crate::Completion`]).
#[derive(Debug, Clone, Serialize)]
pub struct CompleteContext<'a> {
    pub language: &'a str,
    pub code: &'a str,
}

/// Inputs of a repair of a function whose stub the request wrote, asked as plainly as its first
/// attempt: the request's code, the code that failed, and its failing cases (at most a few).
#[derive(Debug, Clone, Serialize)]
pub struct CompleteRepairContext<'a> {
    pub language: &'a str,
    pub code: &'a str,
    pub attempt: &'a str,
    pub error: &'a str,
    pub failures: Vec<Failure<'a>>,
    /// Lessons from earlier repairs of the tenant's, nearest first (none: the memory is off
    /// or has nothing near; the prompt is then as it was before lessons).
    pub lessons: Vec<&'a proto::lesson::Lesson>,
}

/// One failing case, as the repair prompt shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Failure<'a> {
    pub name: &'a str,
    pub inputs: &'a serde_json::Map<String, serde_json::Value>,
    pub expected_output: &'a serde_json::Value,
    pub expected_error: Option<&'a str>,
    pub actual_output: Option<&'a serde_json::Value>,
    pub error: Option<&'a str>,
}

/// An earlier attempt, as the repair prompt shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt<'a> {
    pub attempt: u32,
    pub error_kind: &'a str,
    pub fix: &'a str,
}

/// Inputs of the repair prompt.
#[derive(Debug, Clone, Serialize)]
pub struct RepairContext<'a> {
    pub instruction: &'a str,
    pub language: &'a str,
    pub spec: &'a FunctionSpec,
    pub dependencies: Vec<DependencyCode<'a>>,
    pub code: &'a str,
    pub attempt: u32,
    pub error_kind: &'a str,
    pub error: &'a str,
    pub failures: Vec<Failure<'a>>,
    pub history: Vec<Attempt<'a>>,
    /// As [`CompleteRepairContext::lessons`].
    pub lessons: Vec<&'a proto::lesson::Lesson>,
}

/// What a `debug` or `refactor` job gives every one of its prompts.
#[derive(Debug, Clone, Serialize)]
pub struct Rework<'a> {
    /// The templates see its [`ModeWords`] as `mode`.
    #[serde(skip)]
    pub mode: ReworkMode,
    pub instruction: &'a str,
    pub language: &'a str,
    /// The given code.
    pub code: &'a str,
    pub error: Option<&'a str>,
    pub goals: &'a [String],
}

/// Inputs of a rework's test-writing prompt.
#[derive(Debug, Clone, Serialize)]
pub struct ReworkTestsContext<'a> {
    #[serde(flatten)]
    pub rework: Rework<'a>,
    pub spec: &'a FunctionSpec,
    pub min_cases: u32,
    pub max_cases: u32,
    /// `debug`: the names of earlier cases that all passed on the given code.
    pub not_reproduced: Vec<&'a str>,
}

/// Inputs of a rework's code-writing prompt.
#[derive(Debug, Clone, Serialize)]
pub struct ReworkImplementContext<'a> {
    #[serde(flatten)]
    pub rework: Rework<'a>,
    pub spec: &'a FunctionSpec,
    pub tests: &'a [TestCase],
    /// The cases that fail on the given code (`debug`: they reproduce the error).
    pub failing: Vec<&'a str>,
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .build()
            .expect("a valid syntax configuration"),
    );
    for (name, source) in [
        ("system", SYSTEM),
        ("plan", PLAN),
        ("tests", TESTS),
        ("implement", IMPLEMENT),
        ("repair", REPAIR),
        ("plan_rework", PLAN_REWORK),
        ("tests_rework", TESTS_REWORK),
        ("implement_rework", IMPLEMENT_REWORK),
        ("complete_system", COMPLETE_SYSTEM),
        ("complete", COMPLETE),
        ("complete_repair", COMPLETE_REPAIR),
        ("agent_system", AGENT_SYSTEM),
        ("agent_task", AGENT_TASK),
    ] {
        env.add_template(name, source)
            .expect("bundled templates parse (checked by tests)");
    }
    env
}

/// The templates, parsed once per process (parsing all five on every render was a visible
/// share of a worker's CPU per model call).
static ENVIRONMENT: std::sync::LazyLock<Environment<'static>> =
    std::sync::LazyLock::new(environment);

/// What the rework templates say in each mode's terms, as `mode` (the rest of a template is
/// the same for both): a mode is a set of these, never another's `else`. Part of the
/// templates: a change here is a change of [`PROMPT_VERSION`].
#[derive(Debug, Clone, Copy, Serialize)]
struct ModeWords {
    /// The plan prompt's task.
    plan_task: &'static str,
    /// "Answer exactly one function: the one {function}"
    plan_function: &'static str,
    /// "`purpose` says precisely what the function {purpose}"
    plan_purpose: &'static str,
    /// The test prompt's task.
    tests_task: &'static str,
    /// The cases asked for, one `- ` line each.
    tests_cases: &'static str,
    /// The code prompt's task.
    implement_task: &'static str,
    /// "{cases} `f` ({cases_note}):"
    implement_cases: &'static str,
    implement_cases_note: &'static str,
    /// "the complete {code} code"
    implement_code: &'static str,
    /// What `analysis` holds.
    implement_analysis: &'static str,
}

const DEBUG_WORDS: ModeWords = ModeWords {
    plan_task: "Find the function of this code through which the reported error shows.",
    plan_function: "whose call shows the error",
    plan_purpose: "must return for which inputs: the correct behaviour, not the bug's",
    tests_task: "Write test cases that reproduce a reported error in a function, and pin its correct behaviour.",
    tests_cases: "- at least one case that reproduces the error: its expected value (or expected error) is the correct one, which this code does not give;\n- cases of the correct behaviour around it, which the fix must keep;",
    implement_task: "Fix the cause of a reported error in code.",
    implement_cases: "These cases of",
    implement_cases_note: "the first ones fail on the code above: they reproduce the error",
    implement_code: "fixed",
    implement_analysis: "`error_kind` (how the code failed: syntax, import, runtime, assertion, wrong_output, timeout, memory_limit), `root_cause` (why it failed) and `changes` (what the fix changes).",
};

const REFACTOR_WORDS: ModeWords = ModeWords {
    plan_task: "Find the function of this code through which what it does is used (its entry point).",
    plan_function: "that exercises what the code does",
    plan_purpose: "returns for which inputs now",
    tests_task: "Write characterisation test cases for a function: they pin what it does now, so that a refactoring can be checked against them.",
    tests_cases: "- cases of typical inputs, boundaries, and the errors the code raises, each expecting exactly what this code returns or raises now (not what it should);",
    implement_task: "Refactor code toward its goals, keeping its behaviour.",
    implement_cases: "The code must keep passing these cases of",
    implement_cases_note: "they pass on the code above",
    implement_code: "refactored",
    implement_analysis: "`error_kind` \"none\", `root_cause` (what held the code back against the goals) and `changes` (one line per goal: \"<goal>: what changed for it\").",
};

fn mode_words(mode: ReworkMode) -> &'static ModeWords {
    match mode {
        ReworkMode::Debug => &DEBUG_WORDS,
        ReworkMode::Refactor => &REFACTOR_WORDS,
    }
}

/// What the templates say in each language's terms (the rest of a template is the same for
/// all). Part of the templates: a change here is a change of [`PROMPT_VERSION`] for that
/// language.
#[derive(Debug, Clone, Copy, Serialize)]
struct Words {
    /// "a function that {raises} X"
    raises: &'static str,
    /// "the purpose says must {raise}"
    raise: &'static str,
    /// What `expected_error` holds.
    error_name: &'static str,
    /// How the JSON of an expected value stands for what JSON has not.
    literals: &'static str,
    /// What documents a function.
    doc: &'static str,
    /// What code may bring in.
    imports: &'static str,
    /// Said after the answer's shape, about the code (a leading space, or nothing).
    code_note: &'static str,
    /// How the plan writes a parameter's type (empty: "a <language> type annotation").
    types: &'static str,
    /// What code may use beyond the language (empty: "the <language> standard library").
    packages: &'static str,
}

const PYTHON_WORDS: Words = Words {
    raises: "raises",
    raise: "raise",
    error_name: "the exception type name",
    literals: "tuples and sets as lists",
    doc: "a docstring",
    imports: "imports (standard library only)",
    code_note: "",
    types: "",
    packages: "",
};

const JAVASCRIPT_WORDS: Words = Words {
    raises: "throws",
    raise: "throw",
    error_name: "the name of the Error class thrown (Error, RangeError, TypeError, ...)",
    literals: "Sets as arrays, Maps as objects, undefined as null",
    doc: "a JSDoc comment (/** ... */) right before it",
    imports: "`require` calls of Node's built-in modules (lodash is there too)",
    code_note: " Declare it as `function name(...)`; no `module.exports`, no top-level calls, no `process.exit`.",
    types: "",
    packages: "",
};

const TYPESCRIPT_WORDS: Words = Words {
    imports: "`import` or `require` of Node's built-in modules (lodash is there too)",
    code_note: " Declare it as `function name(...)` with typed parameters and result; no `export`, no top-level calls, no `process.exit`.",
    ..JAVASCRIPT_WORDS
};

const GO_WORDS: Words = Words {
    raises: "fails with",
    raise: "fail",
    error_name: "`error` when the function returns a non-nil error, `panic` when it panics",
    literals: "slices as arrays, maps and structs as objects (a struct by its field names), nil slices as []",
    doc: "a `//` doc comment right before it",
    imports: "imports of the standard library",
    code_note: " Write `func name(...)` with the parameter and result types of the signature above (an `error` result when it can fail); package main, no `func main`, no `init`, no goroutines left running.",
    types: "its Go type (int, float64, string, bool, []T, map[string]T, ...; a function that can fail returns `(T, error)`)",
    packages: "",
};

const BASH_WORDS: Words = Words {
    raises: "fails with",
    raise: "fail (return a non-zero status)",
    error_name: "`error` (any non-zero status), or `status N` for exactly status N",
    literals: "what the function prints: a string as printed, a number or true/false as printed, an array as one line per element, an object as JSON text, null for no output",
    doc: "a `#` comment right before it",
    imports: "commands of coreutils, grep, sed and awk",
    code_note: " Write `name() { ... }`: arguments are $1, $2, ... in the order of the inputs (an array input is one argument per element), the result is what it prints on stdout, a failure is a non-zero `return` with a message on stderr; no top-level commands, no `exit`.",
    types: "its type as the function receives it (string, integer, or `array` for an array spread into arguments)",
    packages: "",
};

const JAVA_WORDS: Words = Words {
    raises: "throws",
    raise: "throw",
    error_name: "the simple name of the exception class thrown or of a superclass (IllegalArgumentException, RuntimeException, ...)",
    literals: "arrays and Lists as arrays, Maps and records as objects",
    doc: "a Javadoc comment (/** ... */) right before it",
    imports: "imports of the JDK (java.util.* is imported already)",
    code_note: " Write it as a `static` method (`public static T name(...)`) with the parameter and result types of the signature above, as a member of a class whose declaration is not yours to write: no class around it, no `main`, no `System.exit`. Helper types go in as `static` nested classes or records.",
    types: "its Java type (int, long, double, boolean, String, int[], List<Integer>, Map<String, Integer>, ...; `void` for no result)",
    packages: "",
};

const RUST_WORDS: Words = Words {
    raises: "fails with",
    raise: "fail",
    error_name: "`Err` when the function returns `Err(..)` (or the error type's name), `panic` when it panics",
    literals: "Vecs, slices, arrays, tuples and sets as arrays, maps and structs as objects, None as null",
    doc: "a `///` doc comment right before it",
    imports: "`use` lines of the standard library (no crates)",
    code_note: " Write `fn name(...)` with the parameter and result types of the signature above (`Result<T, E>` with an `E` that derives or implements Debug when it can fail); no `fn main`, no `std::process::exit`.",
    types: "its Rust type from the standard library (i64, f64, bool, String, &str, Vec<i64>, &[i64], HashMap<String, i64>, Option<T>, (A, B), ...; a function that can fail returns `Result<T, String>`)",
    packages: "",
};

const C_WORDS: Words = Words {
    raises: "fails with",
    raise: "fail",
    error_name: "`abort` when the function aborts (a failed `assert`), `signal` when it crashes (C has no exceptions: prefer an error code in the return value, tested as a normal case)",
    literals: "a string as a string, a character as a one-character string, an array (a pointer parameter) as an array, true/false for a bool",
    doc: "a comment right before it",
    imports: "`#include` lines of the C standard library",
    code_note: " Write the function with the parameter and result types of the signature above (scalars, `bool`, `char`, `const char *` results; an array parameter is a pointer with its length as another parameter; a returned string must outlive the call, e.g. static or malloc'd); no `main`, no `exit`.",
    types: "its C type (int, long long, double, bool, char, const char *, int * for an array with a separate length parameter, ...)",
    packages: "",
};

const CPP_WORDS: Words = Words {
    raises: "throws",
    raise: "throw",
    error_name: "the exception class thrown or a standard base of it, as `std::invalid_argument` or `invalid_argument`",
    literals: "vectors, arrays, sets, pairs and tuples as arrays, maps as objects, std::nullopt as null",
    doc: "a comment right before it",
    imports: "`#include` lines of the C++ standard library",
    code_note: " Write the function with the parameter and result types of the signature above, using the standard library's types (std::vector, std::string, std::map, ...); no `main`, no `exit`.",
    types: "its C++ type from the standard library (int, long long, double, bool, std::string, std::vector<int>, const std::vector<std::string>&, std::map<std::string, int>, std::pair<int, int>, ...)",
    packages: "",
};

const PYTHON_SCI_WORDS: Words = Words {
    imports: "imports (the standard library, numpy, scipy, pandas, sympy, networkx)",
    literals: "tuples, sets and numpy arrays as lists, numpy scalars as numbers",
    packages: "the Python standard library, numpy, scipy, pandas, sympy and networkx",
    ..PYTHON_WORDS
};

fn words(language: &str) -> Words {
    match language {
        "python-sci" => PYTHON_SCI_WORDS,
        "c" => C_WORDS,
        "cpp" => CPP_WORDS,
        "rust" => RUST_WORDS,
        "java" => JAVA_WORDS,
        "bash" => BASH_WORDS,
        "go" => GO_WORDS,
        "javascript" => JAVASCRIPT_WORDS,
        "typescript" => TYPESCRIPT_WORDS,
        _ => PYTHON_WORDS,
    }
}

fn render(template: &str, language: &str, context: impl Serialize) -> Result<Prompt, Error> {
    render_with("system", template, language, context)
}

/// [`render`] of a rework template, which reads its mode's words as `mode`.
fn render_rework(
    template: &str,
    rework: &Rework<'_>,
    context: impl Serialize,
) -> Result<Prompt, Error> {
    let mode = minijinja::Value::from(minijinja::value::Serde(mode_words(rework.mode)));
    let context = minijinja::context! {
        mode,
        ..minijinja::Value::from(minijinja::value::Serde(&context))
    };
    render(template, rework.language, context)
}

fn render_with(
    system: &str,
    template: &str,
    language: &str,
    context: impl Serialize,
) -> Result<Prompt, Error> {
    let env = &*ENVIRONMENT;
    let render = |name: &str, ctx: minijinja::Value| {
        env.get_template(name)
            .and_then(|t| t.render(ctx))
            .map(|s| s.trim().to_owned())
            .map_err(|e| Error::Config(format!("prompt template {name}: {e}")))
    };
    Ok(Prompt {
        system: render(
            system,
            minijinja::context! { language, words => minijinja::Value::from(minijinja::value::Serde(words(language))) },
        )?,
        user: render(
            template,
            minijinja::context! {
                words => minijinja::Value::from(minijinja::value::Serde(words(language))),
                ..minijinja::Value::from(minijinja::value::Serde(&context))
            },
        )?,
    })
}

/// Inputs of an agent's prompt: its system prompt, and its task as the first turn.
#[derive(Debug, Clone, Serialize)]
pub struct AgentContext<'a> {
    pub instruction: &'a str,
    pub language: &'a str,
    pub max_steps: u32,
    /// The files given with the task.
    pub files: Vec<&'a str>,
}

/// An agent's system prompt and first turn (the tools go with every step, not in here).
pub fn agent(context: &AgentContext<'_>) -> Result<Prompt, Error> {
    let render = |name: &str| {
        ENVIRONMENT
            .get_template(name)
            .and_then(|t| t.render(minijinja::value::Serde(context)))
            .map(|s| s.trim().to_owned())
            .map_err(|e| Error::Config(format!("prompt template {name}: {e}")))
    };
    Ok(Prompt {
        system: render("agent_system")?,
        user: render("agent_task")?,
    })
}

pub fn plan(context: &PlanContext<'_>) -> Result<Prompt, Error> {
    render("plan", context.language, context)
}

/// The plan of a `debug` or `refactor` job: the one function its cases call.
pub fn plan_rework(context: &Rework<'_>) -> Result<Prompt, Error> {
    render_rework("plan_rework", context, context)
}

pub fn tests_rework(context: &ReworkTestsContext<'_>) -> Result<Prompt, Error> {
    render_rework("tests_rework", &context.rework, context)
}

pub fn implement_rework(context: &ReworkImplementContext<'_>) -> Result<Prompt, Error> {
    render_rework("implement_rework", &context.rework, context)
}

pub fn tests(context: &TestsContext<'_>) -> Result<Prompt, Error> {
    render("tests", context.language, context)
}

pub fn implement(context: &ImplementContext<'_>) -> Result<Prompt, Error> {
    render("implement", context.language, context)
}

pub fn repair(context: &RepairContext<'_>) -> Result<Prompt, Error> {
    render("repair", context.language, context)
}

/// A repair of a function whose stub the request wrote: the plain system prompt, the
/// request's code, the failed code and its failing cases, the answer a fenced block.
pub fn complete_repair(context: &CompleteRepairContext<'_>) -> Result<Prompt, Error> {
    render_with(
        "complete_system",
        "complete_repair",
        context.language,
        context,
    )
}

/// The first implementation of a function whose stub the request wrote: the plain system
/// prompt (no JSON), the request's code as the user's message.
pub fn complete(context: &CompleteContext<'_>) -> Result<Prompt, Error> {
    render_with("complete_system", "complete", context.language, context)
}

#[cfg(test)]
mod tests {
    use proto::generation::{Complexity, Output, Param, TestKind};
    use serde_json::json;

    use super::*;

    fn sieve() -> FunctionSpec {
        FunctionSpec {
            name: "sum_primes".into(),
            purpose: "Return the sum of all primes up to and including n; raise ValueError for negative n.".into(),
            inputs: vec![Param { name: "n".into(), ty: "int".into() }],
            outputs: Output { ty: "int".into(), description: "the sum".into() },
            dependencies: vec!["sieve".into()],
            complexity: Complexity::Simple,
        }
    }

    fn cases() -> Vec<TestCase> {
        vec![
            TestCase {
                name: "ten".into(),
                kind: TestKind::Normal,
                inputs: json!({"n": 10}).as_object().unwrap().clone(),
                expected_output: json!(17),
                expected_error: None,
                given: false,
            },
            TestCase {
                name: "negative".into(),
                kind: TestKind::Error,
                inputs: json!({"n": -1}).as_object().unwrap().clone(),
                expected_output: json!(null),
                expected_error: Some("ValueError".into()),
                given: false,
            },
        ]
    }

    const INSTRUCTION: &str =
        "Find all primes up to n with the sieve of Eratosthenes, and sum them.";
    const SIEVE_CODE: &str = "def sieve(n):\n    \"\"\"Primes up to n.\"\"\"\n    ...";

    fn snapshot(prompt: &Prompt) -> String {
        format!("--- system\n{}\n--- user\n{}\n", prompt.system, prompt.user)
    }

    #[test]
    fn complete_prompt_is_the_request_asked_as_one_plain_call() {
        let code = "from typing import List\n\n\ndef inc(xs: List[int]) -> List[int]:\n    \"\"\"Add one.\n    >>> inc([1])\n    [2]\n    \"\"\"\n";
        let prompt = complete(&CompleteContext {
            language: "python",
            code,
        })
        .unwrap();
        assert_eq!(
            prompt.system,
            "You are a python programmer. Complete the function the user gives: answer with the \
             whole function, its signature included, in one ```python code block."
        );
        assert_eq!(prompt.user, code.trim());
    }

    #[test]
    fn complete_repair_prompt_shows_the_failing_examples_and_no_schema() {
        let cases = cases();
        let inputs = cases[0].inputs.clone();
        let prompt = complete_repair(&CompleteRepairContext {
            language: "python",
            code: "def f(n):\n    \"\"\"Sum of primes.\"\"\"\n",
            attempt: "def f(n):\n    return 0\n",
            error: "1 of 2 cases failed",
            failures: vec![Failure {
                name: "ten",
                inputs: &inputs,
                expected_output: &cases[0].expected_output,
                expected_error: None,
                actual_output: Some(&json!(0)),
                error: None,
            }],
            lessons: vec![],
        })
        .unwrap();
        assert!(prompt.system.ends_with("in one ```python code block."));
        assert!(
            prompt
                .user
                .contains("- ten: inputs {\"n\": 10}; expected 17; got 0"),
            "{}",
            prompt.user
        );
        assert!(prompt.user.starts_with("def f(n):"));
        assert!(!prompt.user.contains("JSON"));
    }

    #[test]
    fn plan_prompt() {
        let prompt = plan(&PlanContext {
            instruction: INSTRUCTION,
            language: "python",
            constraints: Some("no recursion"),
        })
        .unwrap();
        insta::assert_snapshot!(snapshot(&prompt));
    }

    #[test]
    fn tests_prompt_asks_for_normal_edge_and_error_cases() {
        let spec = sieve();
        let prompt = tests(&TestsContext {
            instruction: INSTRUCTION,
            language: "python",
            spec: &spec,
            test_requirements: None,
            min_cases: 5,
            max_cases: 12,
        })
        .unwrap();
        for word in [
            "`normal`",
            "`edge`",
            "`error`",
            "exact",
            INSTRUCTION,
            &spec.purpose,
        ] {
            assert!(prompt.user.contains(word), "missing {word}");
        }
        insta::assert_snapshot!(snapshot(&prompt));
    }

    #[test]
    fn implement_prompt_includes_dependency_code() {
        let spec = sieve();
        let cases = cases();
        let prompt = implement(&ImplementContext {
            instruction: INSTRUCTION,
            language: "python",
            spec: &spec,
            dependencies: vec![DependencyCode {
                name: "sieve",
                code: SIEVE_CODE,
            }],
            tests: &cases,
        })
        .unwrap();
        assert!(prompt.user.contains(SIEVE_CODE));
        assert!(prompt.user.contains("raises ValueError"));
        insta::assert_snapshot!(snapshot(&prompt));
    }

    #[test]
    fn repair_prompt_shows_expected_and_actual_values_and_the_error_kind() {
        let spec = sieve();
        let cases = cases();
        let actual = json!(10);
        let prompt = repair(&RepairContext {
            instruction: INSTRUCTION,
            language: "python",
            spec: &spec,
            dependencies: vec![DependencyCode {
                name: "sieve",
                code: SIEVE_CODE,
            }],
            code: "def sum_primes(n):\n    return sum(sieve(n - 1))",
            attempt: 2,
            error_kind: "wrong_output",
            error: "1 of 2 cases failed",
            failures: vec![Failure {
                name: &cases[0].name,
                inputs: &cases[0].inputs,
                expected_output: &cases[0].expected_output,
                expected_error: None,
                actual_output: Some(&actual),
                error: None,
            }],
            history: vec![Attempt {
                attempt: 1,
                error_kind: "syntax",
                fix: "closed the bracket",
            }],
            lessons: vec![],
        })
        .unwrap();
        assert!(
            prompt.user.contains("expected 17; got 10"),
            "{}",
            prompt.user
        );
        assert!(prompt.user.contains("`wrong_output`"));
        insta::assert_snapshot!(snapshot(&prompt));
    }

    #[test]
    fn a_repair_shows_its_lessons_and_without_them_is_as_before() {
        let lesson = proto::lesson::Lesson {
            id: "a1b2c3d4e5f60718".into(),
            language: proto::Language::Python,
            error_kind: proto::ErrorKind::WrongOutput,
            signature: "wrong_output: a list, 1 item short".into(),
            case: "upto(n=3): expected [1,2,3]; got [1,2]".into(),
            diff: "--- before\n+++ after\n-    return list(range(1, n))\n+    return list(range(1, n + 1))\n".into(),
            analysis: "The range stopped one short of n.".into(),
            model: "m".into(),
            job: proto::TaskId::new(),
            function: "upto".into(),
            source: proto::lesson::LessonSource::Repair,
            created_ms: 1,
            given: true,
        };
        let cases = cases();
        let inputs = cases[0].inputs.clone();
        let zero = json!(0);
        let context = |lessons| CompleteRepairContext {
            language: "python",
            code: "def f(n):\n    \"\"\"Sum of primes.\"\"\"\n",
            attempt: "def f(n):\n    return 0\n",
            error: "1 of 2 cases failed",
            failures: vec![Failure {
                name: "ten",
                inputs: &inputs,
                expected_output: &cases[0].expected_output,
                expected_error: None,
                actual_output: Some(&zero),
                error: None,
            }],
            lessons,
        };
        let without = complete_repair(&context(vec![])).unwrap();
        let with = complete_repair(&context(vec![&lesson])).unwrap();
        assert!(!without.user.contains("Lessons"), "{}", without.user);
        for part in [
            "wrong_output: a list, 1 item short",
            "The range stopped one short of n.",
            "upto(n=3): expected [1,2,3]; got [1,2]",
            "+    return list(range(1, n + 1))",
        ] {
            assert!(with.user.contains(part), "{part} missing:\n{}", with.user);
        }
        // Before the closing ask, which stays last.
        assert!(
            with.user
                .trim_end()
                .ends_with(without.user.trim_end().lines().last().unwrap())
        );
    }

    /// The same templates in JavaScript's terms; Python's prompts are the snapshots above,
    /// unchanged by the words of other languages.
    #[test]
    fn javascript_prompts_speak_of_throwing_error_classes_and_jsdoc() {
        let spec = sieve();
        let cases = cases();
        let prompt = tests(&TestsContext {
            instruction: INSTRUCTION,
            language: "javascript",
            spec: &spec,
            test_requirements: None,
            min_cases: 5,
            max_cases: 12,
        })
        .unwrap();
        assert!(prompt.system.contains("senior javascript engineer"));
        assert!(
            prompt
                .user
                .contains("must throw, with `expected_error` set to the name of the Error class")
        );
        assert!(prompt.user.contains("Sets as arrays"));
        assert!(!prompt.user.contains("exception type name"));
        let prompt = implement(&ImplementContext {
            instruction: INSTRUCTION,
            language: "javascript",
            spec: &spec,
            dependencies: vec![],
            tests: &cases,
        })
        .unwrap();
        assert!(prompt.user.contains("a JSDoc comment"), "{}", prompt.user);
        assert!(prompt.user.contains("no `module.exports`"));
        assert!(!prompt.user.contains("docstring"));
    }

    #[test]
    fn a_plain_completion_says_how_the_language_writes_a_function_and_python_says_nothing_more() {
        let java = complete(&CompleteContext {
            language: "java",
            code: "class Solution {\n    public boolean f(int x) {\n",
        })
        .unwrap();
        assert!(java.system.contains("`static` method"), "{}", java.system);
        assert!(java.user.contains("public boolean f"), "{}", java.user);
        let python = complete(&CompleteContext {
            language: "python",
            code: "def f(x):\n    \"\"\"Doc.\"\"\"\n",
        })
        .unwrap();
        assert!(
            python.system.ends_with("in one ```python code block."),
            "{}",
            python.system
        );
    }

    #[test]
    fn rework_prompts_say_their_own_modes_words() {
        let (spec, tests) = (sieve(), cases());
        for mode in [ReworkMode::Debug, ReworkMode::Refactor] {
            let rework = Rework {
                mode,
                instruction: INSTRUCTION,
                language: "python",
                code: SIEVE_CODE,
                error: None,
                goals: &[],
            };
            let words = mode_words(mode);
            let plan = plan_rework(&rework).unwrap().user;
            assert!(plan.starts_with(words.plan_task), "{plan}");
            assert!(plan.contains(words.plan_purpose), "{plan}");
            let context = ReworkTestsContext {
                rework: rework.clone(),
                spec: &spec,
                min_cases: 3,
                max_cases: 6,
                not_reproduced: vec![],
            };
            let written = tests_rework(&context).unwrap().user;
            assert!(written.contains(words.tests_cases), "{written}");
            let context = ReworkImplementContext {
                rework,
                spec: &spec,
                tests: &tests,
                failing: vec!["ten"],
            };
            let code = implement_rework(&context).unwrap().user;
            assert!(code.starts_with(words.implement_task), "{code}");
            assert!(code.contains(words.implement_analysis), "{code}");
        }
    }
}
