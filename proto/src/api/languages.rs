//! `GET /v1/languages`: what the sandbox runs.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every language the cluster's sandbox has an image for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Languages {
    pub languages: Vec<LanguageInfo>,
}

/// One language: how to name it, what runs it and how a program meets its test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LanguageInfo {
    /// Its name in requests (`language`).
    pub name: String,
    /// Other names requests may use.
    pub aliases: Vec<String>,
    /// SandboxFusion's name of it (`/run_code`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub sandbox_fusion: Option<String>,
    /// The interpreter's or compiler's version (Debian's package in its image).
    pub version: String,
    /// The sandbox image that runs it.
    pub image: String,
    /// Programs compile first (`compile_timeout_ms`, the `compile_error` verdict).
    pub compiled: bool,
    /// Generation jobs may ask for it (executions take every language).
    pub generation: bool,
    /// The program's and the test's file names in the work directory (reserved in `files`).
    pub main_file: String,
    pub test_file: String,
    /// How a program and its `test` are put together.
    pub test_form: String,
    /// What a program may import beyond the standard library (Debian's packages in the
    /// image).
    pub libraries: Vec<String>,
}
