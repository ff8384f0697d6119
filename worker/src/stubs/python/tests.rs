use serde_json::json;

use super::*;

/// HumanEval/0's prompt, as its data has it.
const HAS_CLOSE_ELEMENTS: &str = "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n    \"\"\" Check if in given list of numbers, are any two numbers closer to each other than\n    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    \"\"\"\n";

/// HumanEval/10's: a helper the request implemented, and the stub.
const MAKE_PALINDROME: &str = "def is_palindrome(string: str) -> bool:\n    \"\"\" Test if given string is a palindrome \"\"\"\n    return string == string[::-1]\n\n\ndef make_palindrome(string: str) -> str:\n    \"\"\" Find the shortest palindrome that begins with a supplied string.\n    >>> make_palindrome('')\n    ''\n    >>> make_palindrome('cat')\n    'catac'\n    \"\"\"\n";

fn inputs(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn a_humaneval_prompt_is_its_own_plan_and_its_doctests_are_given_cases() {
    let wrapped = format!(
        "Implement the Python function `has_close_elements` (keep its name and signature) as its docstring describes:\n\n{HAS_CLOSE_ELEMENTS}"
    );
    for instruction in [HAS_CLOSE_ELEMENTS, wrapped.as_str()] {
        let stubs = stubs(instruction).expect("a stub");
        let [spec] = &stubs.specs[..] else {
            panic!("{stubs:?}")
        };
        assert_eq!(spec.name, "has_close_elements");
        let params: Vec<(&str, &str)> = spec
            .inputs
            .iter()
            .map(|p| (p.name.as_str(), p.ty.as_str()))
            .collect();
        assert_eq!(params, [("numbers", "List[float]"), ("threshold", "float")]);
        assert_eq!(spec.outputs.ty, "bool");
        assert!(
            spec.purpose.starts_with("Check if in given list"),
            "{spec:?}"
        );
        assert!(spec.dependencies.is_empty());
        assert_eq!(stubs.code.preamble, "from typing import List\n");
        assert_eq!(stubs.code.code, HAS_CLOSE_ELEMENTS);
        let given = &stubs.code.given["has_close_elements"];
        let cases: Vec<(&str, &Map<String, Value>, &Value, bool)> = given
            .iter()
            .map(|c| (c.name.as_str(), &c.inputs, &c.expected_output, c.given))
            .collect();
        assert_eq!(
            cases,
            [
                (
                    "given_1",
                    &inputs(json!({"numbers": [1.0, 2.0, 3.0], "threshold": 0.5})),
                    &json!(false),
                    true
                ),
                (
                    "given_2",
                    &inputs(json!({"numbers": [1.0, 2.8, 3.0, 4.0, 5.0, 2.0], "threshold": 0.3})),
                    &json!(true),
                    true
                ),
            ]
        );
    }
}

#[test]
fn implemented_functions_are_the_preamble_and_only_stubs_are_planned() {
    let stubs = stubs(MAKE_PALINDROME).expect("a stub");
    let names: Vec<&str> = stubs.specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["make_palindrome"]);
    assert_eq!(
        stubs.code.preamble,
        "def is_palindrome(string: str) -> bool:\n    \"\"\" Test if given string is a palindrome \"\"\"\n    return string == string[::-1]\n"
    );
    let expected: Vec<&Value> = stubs.code.given["make_palindrome"]
        .iter()
        .map(|c| &c.expected_output)
        .collect();
    assert_eq!(expected, [&json!(""), &json!("catac")]);
}

#[test]
fn stated_examples_and_asserts_are_given_cases_and_what_is_not_a_literal_is_left_out() {
    let instruction = "```python\ndef add(x: int, y: int = 0):\n    \"\"\"Add two numbers.\n\n    For example: add(2, 3) ==> 5\n    add(x=1) -> 1\n    Example: add(-1, y=1) == 0.\n    assert add(4, 4) == 8\n    add(a, 1) == 2\n    add(1, 2) returns 3\n    >>> add(2, 3)\n    5\n    >>> add(1, 1)\n    Traceback (most recent call last):\n    >>> print(add(1, 2))\n    3\n    \"\"\"\n    ...\n```\nMake it fast.";
    let stubs = stubs(instruction).expect("a stub");
    let cases: Vec<(Value, Value)> = stubs.code.given["add"]
        .iter()
        .map(|c| (Value::Object(c.inputs.clone()), c.expected_output.clone()))
        .collect();
    assert_eq!(
        cases,
        [
            (json!({"x": 2, "y": 3}), json!(5)),
            (json!({"x": 1}), json!(1)),
            (json!({"x": -1, "y": 1}), json!(0)),
            (json!({"x": 4, "y": 4}), json!(8)),
            (json!({"x": 1, "y": 2}), json!(3)),
        ],
        "the doctest repeating add(2, 3) is one case; the traceback and print(...) are left out"
    );
    assert_eq!(stubs.specs[0].inputs[0].ty, "int");
    assert_eq!(stubs.specs[0].outputs.ty, "Any");
}

#[test]
fn several_stubs_depend_on_those_their_docstrings_call() {
    let instruction = "def words(text: str) -> list:\n    \"\"\"The words of text.\"\"\"\n\n\ndef count(text: str) -> int:\n    \"\"\"How many words(text) gives.\n    >>> count('a b')\n    2\n    \"\"\"\n";
    let stubs = stubs(instruction).expect("stubs");
    let deps: Vec<(&str, Vec<&str>)> = stubs
        .specs
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.dependencies.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(deps, [("words", vec![]), ("count", vec!["words"])]);
    assert!(
        !stubs.code.given.contains_key("words"),
        "no examples, no cases"
    );
    assert_eq!(stubs.code.preamble, "");
}

#[test]
fn prose_bad_code_and_unnameable_parameters_leave_planning_to_the_model() {
    for instruction in [
        "Find all primes up to n with a sieve, and sum them.",
        "def f(x):\n    return x +\n",
        "def f(*args):\n    \"\"\"Sum of args.\"\"\"\n",
        "def f(x):\n    \"\"\"Doubles.\"\"\"\n    return 2 * x\n",
        "Write a function like:\n\ndef f(x):\n    \"\"\"Doubles.\"\"\"\n\nand make it fast.",
    ] {
        assert_eq!(stubs(instruction), None, "{instruction}");
    }
}
