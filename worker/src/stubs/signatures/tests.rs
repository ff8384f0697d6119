use serde_json::json;

use super::*;

/// The stubs of `code` in `language`, which must make some.
fn of(language: Language, code: &str) -> Stubs {
    stubs(language, code).unwrap_or_else(|| panic!("no stubs in {code}"))
}

fn params(spec: &FunctionSpec) -> Vec<(&str, &str)> {
    spec.inputs
        .iter()
        .map(|p| (p.name.as_str(), p.ty.as_str()))
        .collect()
}

/// The given cases of `function` as (inputs, expected) pairs.
fn given(stubs: &Stubs, function: &str) -> Vec<(Value, Value)> {
    stubs
        .code
        .given
        .get(function)
        .into_iter()
        .flatten()
        .map(|c| {
            assert!(c.given);
            (Value::Object(c.inputs.clone()), c.expected_output.clone())
        })
        .collect()
}

#[test]
fn a_multipl_e_javascript_prompt_that_stops_at_its_brace_is_its_own_plan() {
    let prompt = "//Check if in given list of numbers, are any two numbers closer to each other than\n// given threshold.\n// >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n// false\n// >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n// true\nfunction has_close_elements(numbers, threshold){\n";
    let stubs = of(Language::Javascript, prompt);
    let [spec] = &stubs.specs[..] else {
        panic!("{:?}", stubs.specs)
    };
    assert_eq!(spec.name, "has_close_elements");
    assert_eq!(params(spec), [("numbers", "any"), ("threshold", "any")]);
    assert!(
        spec.purpose.starts_with("Check if in given list"),
        "{}",
        spec.purpose
    );
    assert_eq!(
        given(&stubs, "has_close_elements"),
        [
            (
                json!({"numbers": [1.0, 2.0, 3.0], "threshold": 0.5}),
                json!(false)
            ),
            (
                json!({"numbers": [1.0, 2.8, 3.0, 4.0, 5.0, 2.0], "threshold": 0.3}),
                json!(true)
            ),
        ]
    );
    // Nothing but the stub: no preamble; the prompt is the first call's code as given.
    assert_eq!(stubs.code.preamble, "");
    assert_eq!(stubs.code.code, prompt);
}

#[test]
fn typescript_types_and_objects_and_a_helper_that_stays_in_the_preamble() {
    let code = "import { strict } from 'assert';\n\nfunction helper(x: number): number { return x * 2; }\n\n/**\n * Counts the words of each line.\n * count_words({\"a b\": 1, c: -2}, 'x') == [2, -3.5]\n */\nexport function count_words(lines: Record<string, number>, sep?: string): number[] {\n  throw new Error(\"not implemented\");\n}\n";
    let stubs = of(Language::Typescript, code);
    let [spec] = &stubs.specs[..] else {
        panic!("{:?}", stubs.specs)
    };
    assert_eq!(
        params(spec),
        [("lines", "Record<string, number>"), ("sep", "string")]
    );
    assert_eq!(spec.outputs.ty, "number[]");
    assert_eq!(
        given(&stubs, "count_words"),
        [(
            json!({"lines": {"a b": 1, "c": -2}, "sep": "x"}),
            json!([2, -3.5])
        )]
    );
    assert!(
        stubs.code.preamble.contains("function helper"),
        "{}",
        stubs.code.preamble
    );
    assert!(
        !stubs.code.preamble.contains("count_words"),
        "{}",
        stubs.code.preamble
    );
}

#[test]
fn a_humaneval_x_go_prompt_keeps_its_imports_but_not_its_package() {
    let prompt = "package main\n\nimport (\n    \"math\"\n)\n\n// Check if in given list of numbers, are any two numbers closer to each other than given threshold.\n// >>> HasCloseElements([]float64{1.0, 2.0, 3.0}, 0.5)\n// false\n// >>> Pairs(map[string]int{\"a\": 1}, `raw`) ➞ [][]int{{1}, {2}}\nfunc HasCloseElements(numbers []float64, a, b int) bool {\n";
    let stubs = of(Language::Go, prompt);
    let spec = &stubs.specs[0];
    assert_eq!(spec.name, "HasCloseElements");
    assert_eq!(
        params(spec),
        [("numbers", "[]float64"), ("a", "int"), ("b", "int")]
    );
    assert_eq!(spec.outputs.ty, "bool");
    // Three parameters, one argument: not this function's call, left out; the other line
    // calls another function.
    assert!(given(&stubs, "HasCloseElements").is_empty());
    assert_eq!(stubs.code.preamble, "import (\n    \"math\"\n)\n");
    assert_eq!(
        values::literal(Grammar::Go, "[][]int{{1}, {-2}}"),
        Some(json!([[1], [-2]]))
    );
    assert_eq!(
        values::literal(Grammar::Go, "map[string][]string{\"a\": {`x`}}"),
        Some(json!({"a": ["x"]}))
    );
}

#[test]
fn a_humaneval_x_rust_prompt_gets_its_comment_from_the_top() {
    let prompt = "\n/*\n Check if in given list of numbers, are any two numbers closer to each other than\n    given threshold.\n    >>> has_close_elements(vec![1.0, 2.0, 3.0], 0.5)\n    false\n*/\nuse std::{slice::Iter, cmp::{max, self}};\nuse std::collections::HashMap;\n\nfn has_close_elements(numbers:Vec<f32>, threshold: f32) -> bool{\n";
    let stubs = of(Language::Rust, prompt);
    let spec = &stubs.specs[0];
    assert_eq!(
        params(spec),
        [("numbers", "Vec<f32>"), ("threshold", "f32")]
    );
    assert_eq!(spec.outputs.ty, "bool");
    assert!(
        spec.purpose.contains("closer to each other"),
        "{}",
        spec.purpose
    );
    assert_eq!(
        given(&stubs, "has_close_elements"),
        [(
            json!({"numbers": [1.0, 2.0, 3.0], "threshold": 0.5}),
            json!(false)
        )]
    );
    assert!(
        stubs
            .code
            .preamble
            .contains("use std::collections::HashMap;")
    );
    for (text, value) in [
        ("vec![1, -2]", json!([1, -2])),
        ("String::from(\"a\")", json!("a")),
        ("\"b\".to_string()", json!("b")),
        ("Some(7u8)", json!(7)),
        ("None", json!(null)),
        ("(1, 'c')", json!([1, "c"])),
        ("r#\"x\"y\"#", json!("x\"y")),
        ("-1.5e3", json!(-1500.0)),
    ] {
        assert_eq!(values::literal(Grammar::Rust, text), Some(value), "{text}");
    }
    assert_eq!(values::literal(Grammar::Rust, "x + 1"), None);
}

#[test]
fn a_humaneval_x_java_prompt_is_planned_from_inside_its_class() {
    let prompt = "import java.util.*;\nimport java.lang.*;\n\nclass Solution {\n    /**\n    Check if in given list of numbers, are any two numbers closer to each other than given threshold.\n    >>> hasCloseElements(Arrays.asList(1.0, 2.0, 3.0), 0.5)\n    false\n    >>> hasCloseElements(new ArrayList<>(List.of(1.0, 2.8)), 0.3)\n    true\n     */\n    public boolean hasCloseElements(List<Double> numbers, double threshold) {\n";
    let stubs = of(Language::Java, prompt);
    let spec = &stubs.specs[0];
    assert_eq!(spec.name, "hasCloseElements");
    assert_eq!(
        params(spec),
        [("numbers", "List<Double>"), ("threshold", "double")]
    );
    assert_eq!(spec.outputs.ty, "boolean");
    assert_eq!(
        given(&stubs, "hasCloseElements"),
        [
            (
                json!({"numbers": [1.0, 2.0, 3.0], "threshold": 0.5}),
                json!(false)
            ),
            (
                json!({"numbers": [1.0, 2.8], "threshold": 0.3}),
                json!(true)
            ),
        ]
    );
    assert_eq!(
        stubs.code.preamble,
        "import java.util.*;\nimport java.lang.*;\n"
    );
    assert_eq!(
        values::literal(Grammar::Java, "Map.of(\"a\", 1L, \"b\", -2.5f)"),
        Some(json!({"a": 1, "b": -2.5}))
    );
}

#[test]
fn c_and_cpp_signatures_give_their_declared_types() {
    let prompt = "/*\nCheck if in given vector of numbers, are any two numbers closer to each other than given threshold.\n>>> has_close_elements({1.0, 2.0, 3.0}, 0.5)\nfalse\n*/\n#include<stdio.h>\n#include<vector>\n#include<math.h>\nusing namespace std;\nbool has_close_elements(vector<float> numbers, const std::string& s, float threshold){\n";
    let stubs = of(Language::Cpp, prompt);
    let spec = &stubs.specs[0];
    assert_eq!(
        params(spec),
        [
            ("numbers", "vector<float>"),
            ("s", "const std::string&"),
            ("threshold", "float")
        ]
    );
    // Two arguments for three parameters: left out.
    assert!(given(&stubs, "has_close_elements").is_empty());
    assert!(stubs.code.preamble.contains("using namespace std;"));
    assert_eq!(
        values::literal(Grammar::Cpp, "std::vector<int>{1, -2}"),
        Some(json!([1, -2]))
    );

    let c = "#include <stdbool.h>\n\n// Whether s starts with c.\n// starts(\"abc\", 'a') == true\nbool starts(const char *s, char c);\n\nint twice(int x) { return 2 * x; }\n";
    let stubs = of(Language::C, c);
    let [spec] = &stubs.specs[..] else {
        panic!("{:?}", stubs.specs)
    };
    assert_eq!(params(spec), [("s", "const char *"), ("c", "char")]);
    assert_eq!(
        given(&stubs, "starts"),
        [(json!({"s": "abc", "c": "a"}), json!(true))]
    );
    assert!(stubs.code.preamble.contains("int twice(int x)"));
    assert!(!stubs.code.preamble.contains("starts"));
}

#[test]
fn implemented_functions_prose_and_code_that_does_not_parse_leave_planning_to_the_model() {
    for (language, text) in [
        (Language::Javascript, "Write a function that sums a list."),
        (
            Language::Javascript,
            "function done(a) {\n  return a + 1;\n}\n",
        ),
        (Language::Go, "func Broken(a int {\n"),
        (Language::Rust, "fn f(&self) -> u8 { todo!() }\n"),
        (Language::Bash, "f() {\n}\n"),
    ] {
        assert!(stubs(language, text).is_none(), "{language:?}: {text}");
    }
}

#[test]
fn several_stubs_depend_on_those_their_comments_call() {
    let code = "// Whether n is prime.\nfunction isPrime(n) {}\n\n// The primes up to n, by isPrime(k) for each k.\nfunction primes(n) {}\n";
    let stubs = of(Language::Javascript, code);
    let names: Vec<(&str, Vec<String>)> = stubs
        .specs
        .iter()
        .map(|s| (s.name.as_str(), s.dependencies.clone()))
        .collect();
    assert_eq!(
        names,
        [("isPrime", vec![]), ("primes", vec!["isPrime".to_owned()])]
    );
}
