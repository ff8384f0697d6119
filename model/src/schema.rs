//! Answer schemas: generated from the Rust types, validated with jsonschema, and a fallback that
//! finds JSON in plain text for servers without structured output.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use schemars::JsonSchema;
use serde_json::Value;

use crate::SchemaSpec;

/// Compiled validators by schema name: a name stands for one schema (each answer type has its
/// own `NAME`). Compiling on every answer cost more than the validation itself.
static VALIDATORS: LazyLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
    LazyLock::new(Mutex::default);

/// The named schema of `T`. `strict` asks servers that support it to enforce the schema
/// exactly; it needs every object closed and every field required, which free-form values
/// (such as test inputs) cannot satisfy.
pub fn spec_for<T: JsonSchema>(name: &str, strict: bool) -> SchemaSpec {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        // Servers differ in which meta keywords they accept; the schema itself is enough.
        map.remove("$schema");
    }
    spell_out_any(&mut schema, None);
    SchemaSpec {
        name: name.to_owned(),
        schema,
        strict,
    }
}

/// Every JSON type, spelled out for a value of any type.
const ANY_TYPE: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Keywords that say nothing about a value's type.
const ANNOTATIONS: [&str; 5] = ["description", "title", "default", "examples", "$comment"];

/// Gives a subschema that allows any value (`{}`, or annotations only: a free-form field such as
/// a test's expected output) the explicit list of every JSON type. The same values validate;
/// a server that turns the schema into a grammar (llama.cpp) refuses the implicit form and
/// falls back to unconstrained JSON for the whole answer. `parent` is the key `value` is under:
/// the maps of `properties` and `$defs` name subschemas, they are not one.
fn spell_out_any(value: &mut Value, parent: Option<&str>) {
    match value {
        Value::Object(map) => {
            let names_schemas = matches!(parent, Some("properties" | "$defs" | "definitions"));
            if !names_schemas
                && parent.is_some()
                && map.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))
            {
                map.insert("type".into(), serde_json::json!(ANY_TYPE));
            }
            for (key, child) in map.iter_mut() {
                let key = if names_schemas { "" } else { key.as_str() };
                spell_out_any(child, Some(key));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| spell_out_any(i, Some(""))),
        _ => {}
    }
}

/// [`spec_for`], generated once per name and strictness (a name stands for one type).
pub fn cached_spec_for<T: JsonSchema>(name: &str, strict: bool) -> SchemaSpec {
    static SPECS: LazyLock<Mutex<HashMap<(String, bool), SchemaSpec>>> =
        LazyLock::new(Mutex::default);
    let key = (name.to_owned(), strict);
    if let Some(spec) = SPECS.lock().expect("poisoned").get(&key) {
        return spec.clone();
    }
    let spec = spec_for::<T>(name, strict);
    SPECS.lock().expect("poisoned").insert(key, spec.clone());
    spec
}

/// Checks `value` against `spec`; the error lists every violation with its location.
pub fn validate(spec: &SchemaSpec, value: &Value) -> Result<(), String> {
    let cached = VALIDATORS
        .lock()
        .expect("poisoned")
        .get(&spec.name)
        .cloned();
    let validator = match cached {
        Some(validator) => validator,
        None => {
            let validator = Arc::new(
                jsonschema::validator_for(&spec.schema)
                    .map_err(|e| format!("the {} schema itself is invalid: {e}", spec.name))?,
            );
            VALIDATORS
                .lock()
                .expect("poisoned")
                .insert(spec.name.clone(), validator.clone());
            validator
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(value)
        .take(10)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at {path}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The body of the first fenced code block of `text` (any language tag) that is not JSON, or
/// `None`: code a model wrote as a plain chat answer would hold it.
pub fn fenced_code(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n')? + 1;
        let tag = after[..body_start].trim();
        let end = after[body_start..]
            .find("```")
            .unwrap_or(after.len() - body_start);
        let body = &after[body_start..body_start + end];
        if !body.trim().is_empty() && tag != "json" {
            return Some(body.trim_end().to_owned() + "\n");
        }
        rest = &after[(body_start + end + 3).min(after.len())..];
    }
    None
}

/// Finds the JSON answer in a model's text: the whole text, else the first fenced block that
/// parses, else the first `{…}` that parses.
pub fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        return Some(value);
    }
    let mut rest = trimmed;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        let Some(end) = after[body_start..].find("```") else {
            break;
        };
        let body = &after[body_start..body_start + end];
        if let Ok(value) = serde_json::from_str::<Value>(body.trim()) {
            return Some(value);
        }
        rest = &after[body_start + end + 3..];
    }
    for (index, _) in trimmed.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&trimmed[index..]).into_iter::<Value>();
        if let Some(Ok(value)) = values.next() {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proto::generation::{FunctionSpecs, Implementation, TestCases};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_value_of_any_type_is_spelled_out_and_validates_as_before() {
        let spec = spec_for::<TestCases>("test_cases", false);
        let expected = &spec.schema["$defs"]["TestCase"]["properties"]["expected_output"];
        assert_eq!(expected["type"], json!(ANY_TYPE), "{expected}");
        // Property maps are not schemas: none gained a `type`.
        let properties = spec.schema["$defs"]["TestCase"]["properties"]
            .as_object()
            .unwrap();
        assert!(!properties.contains_key("type"));
        for output in [
            json!(1),
            json!("x"),
            json!(null),
            json!([1]),
            json!({"a": 1}),
            json!(true),
        ] {
            let answer = json!({"cases": [{"name": "n", "kind": "normal", "inputs": {},
                                           "expected_output": output}]});
            validate(&spec, &answer).unwrap();
        }
    }

    #[test]
    fn fenced_code_is_the_first_block_that_is_not_json_even_unclosed() {
        let answer =
            "Sure:\n```json\n{\"a\": 1}\n```\n```python\ndef f():\n    return 1\n```\nDone.";
        assert_eq!(
            fenced_code(answer).as_deref(),
            Some("def f():\n    return 1\n")
        );
        // Cut off at the token limit before the closing fence: the code so far.
        assert_eq!(
            fenced_code("```py\ndef g(x):\n    return x").as_deref(),
            Some("def g(x):\n    return x\n")
        );
        assert_eq!(fenced_code("def f(): pass"), None);
        assert_eq!(fenced_code("```\n```"), None);
    }

    #[test]
    fn extracts_from_plain_fenced_and_embedded_text() {
        assert_eq!(extract_json(r#" {"a": 1} "#), Some(json!({"a": 1})));
        let fenced = "Here you go:\n```json\n{\"code\": \"def f(): pass\"}\n```\nDone.";
        assert_eq!(extract_json(fenced), Some(json!({"code": "def f(): pass"})));
        let embedded = "Sure! The answer is {\"x\": [1, 2, {\"y\": \"}\"}]} and that's it.";
        assert_eq!(
            extract_json(embedded),
            Some(json!({"x": [1, 2, {"y": "}"}]}))
        );
        assert_eq!(extract_json("no json here"), None);
        let bad_fence_then_good = "```\nnot json\n```\n```json\n{\"ok\": true}\n```";
        assert_eq!(extract_json(bad_fence_then_good), Some(json!({"ok": true})));
    }

    #[test]
    fn validation_names_the_problem() {
        let spec = spec_for::<Implementation>("implementation", true);
        assert!(validate(&spec, &json!({"code": "x = 1", "analysis": null})).is_ok());
        let err = validate(&spec, &json!({"analysis": null})).unwrap_err();
        assert!(err.contains("code"), "{err}");
        let err = validate(&spec, &json!({"code": 5, "analysis": null})).unwrap_err();
        assert!(err.contains("/code"), "{err}");
    }

    #[test]
    fn specs_close_objects_and_test_inputs_are_free_form() {
        let specs = spec_for::<FunctionSpecs>("function_specs", true);
        let err = validate(&specs, &json!({"functions": [], "extra": 1})).unwrap_err();
        assert!(err.contains("extra"), "{err}");
        let tests = spec_for::<TestCases>("test_cases", false);
        let answer = json!({"cases": [{"name": "a", "kind": "normal", "inputs": {"n": [1, {"k": 2}]},
            "expected_output": {"anything": true}, "expected_error": null}]});
        assert!(validate(&tests, &answer).is_ok());
    }
}
