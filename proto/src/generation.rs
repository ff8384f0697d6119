//! What the model produces while generating code: function specifications, test cases and
//! implementations. These types are also the JSON schemas the model must answer in (generated
//! by schemars), so a change here changes what the model is asked for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How hard a function is expected to be; used to budget attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Complexity {
    Simple,
    Moderate,
    Complex,
}

/// One parameter of a function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Parameter name, a valid identifier.
    pub name: String,
    /// Type annotation in the target language, e.g. `int` or `list[int]`.
    #[serde(rename = "type")]
    pub ty: String,
}

/// What a function returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Output {
    #[serde(rename = "type")]
    pub ty: String,
    pub description: String,
}

/// The specification of one function of the solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// Function name, a valid identifier, unique in the solution.
    pub name: String,
    /// What the function does, precisely enough to write tests from.
    pub purpose: String,
    pub inputs: Vec<Param>,
    pub outputs: Output,
    /// Names of other functions of this solution that this one calls.
    pub dependencies: Vec<String>,
    pub complexity: Complexity,
}

/// The `function_specs` answer: the request split into functions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpecs {
    pub functions: Vec<FunctionSpec>,
}

/// Kind of a test case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    Normal,
    Edge,
    Error,
}

/// One test case of one function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// Short, unique name of the case.
    pub name: String,
    pub kind: TestKind,
    /// Arguments by parameter name.
    #[schema(value_type = Object)]
    pub inputs: serde_json::Map<String, serde_json::Value>,
    /// The exact expected return value (`null` when an error is expected).
    pub expected_output: serde_json::Value,
    /// Name of the exception type expected (e.g. `ValueError`), or `null`.
    #[schema(required = true)]
    pub expected_error: Option<String>,
    /// An example the request itself gave (a doctest, an `assert`, `f(x) == y`): right by
    /// definition, never replaced by a generated case. Never part of the model's answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(skip)]
    pub given: bool,
}

/// The `test_cases` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestCases {
    pub cases: Vec<TestCase>,
}

/// Why an earlier attempt failed, as the model understood it (repairs only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Analysis {
    /// One of syntax, import, runtime, assertion, wrong_output, timeout, memory_limit.
    pub error_kind: String,
    pub root_cause: String,
    /// What this version changes.
    pub changes: String,
}

/// The `implementation` answer (first attempts and repairs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Implementation {
    /// The complete source of the function (and any private helpers), no tests.
    pub code: String,
    /// For a repair: the analysis of the failure; `null` on a first attempt.
    pub analysis: Option<Analysis>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_name_every_field_as_required() {
        let schema = serde_json::to_value(schemars::schema_for!(FunctionSpecs)).unwrap();
        let text = schema.to_string();
        for field in ["purpose", "inputs", "dependencies", "complexity"] {
            assert!(text.contains(field), "{field} missing from the schema");
        }
        let implementation = serde_json::to_value(schemars::schema_for!(Implementation)).unwrap();
        let required = implementation["required"].as_array().unwrap();
        assert!(required.iter().any(|r| r == "code"));
    }

    #[test]
    fn a_test_case_reads_as_the_result_format_shows_it() {
        let case: TestCase = serde_json::from_str(
            r#"{"name":"one","kind":"edge","inputs":{"n":1},"expected_output":[],"expected_error":null}"#,
        )
        .unwrap();
        assert_eq!(case.kind, TestKind::Edge);
        assert_eq!(case.inputs["n"], 1);
    }
}
