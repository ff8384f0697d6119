//! Reading request bodies: the one way every handler turns bytes into a typed request, with
//! errors that name the field.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use proto::api::ErrorCode;
use serde_json::Value;

use crate::error::ApiError;

/// Why a body does not read as the request: where (a field path such as `items[3].timeout_ms`,
/// when one is to blame) and what.
#[derive(Debug)]
pub(crate) struct BodyError {
    pub(crate) path: Option<String>,
    pub(crate) message: String,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{path}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl BodyError {
    /// 400 `malformed_body`, its message prefixed with `context` (`invalid request body: `).
    pub(crate) fn into_api(self, context: &str) -> ApiError {
        let error = ApiError::new(ErrorCode::MalformedBody, format!("{context}{self}"));
        match self.path {
            Some(path) => error.about(path),
            None => error,
        }
    }
}

/// Reads a JSON request body. A number with a zero fraction (`10.0`) counts as an integer, as
/// JSON Schema (and so the OpenAPI document) counts it. Errors name the field they are about
/// (`items[3].timeout_ms: invalid type: …`).
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let error =
        match serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes)) {
            Ok(value) => return Ok(value),
            Err(e)
                if e.inner()
                    .to_string()
                    .starts_with("invalid type: floating point") =>
            {
                e
            }
            Err(e) => return Err(describe(&e)),
        };
    let mut value: Value = serde_json::from_slice(bytes).map_err(|e| BodyError {
        path: None,
        message: e.to_string(),
    })?;
    integral(&mut value);
    // Past the integral floats, another error may be the first: report that one.
    serde_path_to_error::deserialize(value).map_err(|e| {
        if e.inner()
            .to_string()
            .starts_with("invalid type: floating point")
        {
            describe(&error)
        } else {
            describe(&e)
        }
    })
}

fn describe<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> BodyError {
    let message = e.inner().to_string();
    let path = e.path().to_string();
    // A missing field is reported at its object's path (an unknown one at its own): name the
    // field itself.
    let field = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field);
    // `?` is serde_path_to_error's "somewhere unknown" (e.g. a syntax error inside a map).
    let path = match (path.as_str(), field) {
        ("." | "?", None) => None,
        ("." | "?", Some(field)) => Some(field.to_owned()),
        (path, None) => Some(path.to_owned()),
        (path, Some(field)) => Some(format!("{path}.{field}")),
    };
    BodyError { path, message }
}

/// A JSON body, or the 4xx that says what is wrong with it.
pub(crate) fn read_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| crate::error::body_rejected(e.status(), e.body_text()))?;
    from_json(&body).map_err(|e| e.into_api("invalid request body: "))
}

/// Rewrites integral floats that are exact (|x| <= 2^53) as integers.
fn integral(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT)
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral),
        Value::Object(fields) => fields.values_mut().for_each(integral),
        _ => {}
    }
}
