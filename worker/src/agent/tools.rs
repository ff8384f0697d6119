//! The agent's tools: what the model is offered ([`specs`]) and a call read into an
//! [`Action`], strictly: an unknown tool or arguments that do not fit the tool's schema are a
//! malformed call, answered as an error the model is shown.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// `run_code`: a program run as a fresh process in the working directory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    /// `python`, `javascript` or `bash` (what the session's image runs).
    pub language: String,
    pub code: String,
    /// Given to the program on its standard input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Its deadline in milliseconds (default 60000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `run_shell`: a bash command, as a fresh process in the working directory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunShell {
    pub command: String,
    /// Its deadline in milliseconds (default 60000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `read_file`: a text file's lines.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// Relative to the working directory.
    pub path: String,
    /// The first line to show, from 1 (default 1).
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many lines (default: all, within the observation's bound).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `write_file`: creates or replaces a file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    pub path: String,
    pub content: String,
}

/// `edit_file`: replaces the one occurrence of `old` with `new`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    pub path: String,
    pub old: String,
    pub new: String,
}

/// `list_files`: the files below a folder.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFiles {
    /// A folder relative to the working directory (default: all of it).
    #[serde(default)]
    pub path: Option<String>,
}

/// `install_packages`: the operator's allowed packages, installed offline.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallPackages {
    /// Requirements as pip takes them (`numpy`, `attrs==23.2.0`).
    pub names: Vec<String>,
}

/// `run_tests`: the language's test runner over a path.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTests {
    /// A test file or folder (default: the working directory).
    #[serde(default)]
    pub path: Option<String>,
}

/// `finish`: the run's last word.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finish {
    /// What the task asked for, in words.
    pub answer: String,
    /// Files of the working directory that are the result.
    #[serde(default)]
    pub files: Vec<String>,
}

/// A call read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    RunCode(RunCode),
    RunShell(RunShell),
    ReadFile(ReadFile),
    WriteFile(WriteFile),
    EditFile(EditFile),
    ListFiles(ListFiles),
    InstallPackages(InstallPackages),
    RunTests(RunTests),
    Finish(Finish),
}

/// Every tool: name, what it does, and its arguments' type.
macro_rules! tools {
    ($($name:literal => $variant:ident($ty:ty): $about:literal,)*) => {
        /// What the model is offered.
        pub fn specs() -> Vec<model::ToolSpec> {
            vec![$(model::ToolSpec {
                name: $name.to_owned(),
                description: $about.to_owned(),
                parameters: parameters::<$ty>(),
            },)*]
        }

        /// The names of the tools, for an unknown one's error.
        pub const NAMES: &[&str] = &[$($name),*];

        /// `name`'s call with `arguments` (JSON text), or what is wrong with it.
        pub fn read(name: &str, arguments: &str) -> Result<Action, String> {
            let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
            match name {
                $($name => serde_json::from_str::<$ty>(arguments)
                    .map(Action::$variant)
                    .map_err(|e| format!("the arguments of `{}` do not fit its schema: {e}", $name)),)*
                other => Err(format!(
                    "there is no tool `{other}`; the tools are: {}",
                    NAMES.join(", ")
                )),
            }
        }
    };
}

tools! {
    "run_code" => RunCode(RunCode): "Run a program (python, javascript or bash) as a fresh process in the working directory; answers its exit code, stdout and stderr.",
    "run_shell" => RunShell(RunShell): "Run a bash command as a fresh process in the working directory (no network); answers its exit code, stdout and stderr.",
    "read_file" => ReadFile(ReadFile): "Read a text file of the working directory, or some of its lines.",
    "write_file" => WriteFile(WriteFile): "Create or replace a file of the working directory with the given content.",
    "edit_file" => EditFile(EditFile): "Replace the one occurrence of `old` in a file with `new` (give enough of the text to make it unique).",
    "list_files" => ListFiles(ListFiles): "List the files of the working directory (or of a folder of it) with their sizes.",
    "install_packages" => InstallPackages(InstallPackages): "Install Python packages the operator allows (offline); the session's state and files are kept.",
    "run_tests" => RunTests(RunTests): "Run the tests (python: pytest, else unittest; javascript: node --test; bash: each test_*.sh) over a file or folder.",
    "finish" => Finish(Finish): "End the task: your answer, and the files of the working directory that are the result. Call it last, alone.",
}

/// A type's schema as a tool's parameters: an object, without the `$schema` and `title`
/// lines the API does not want.
fn parameters<T: JsonSchema>() -> serde_json::Value {
    let mut value = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
        object.remove("description");
    }
    value
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::RunCode(_) => "run_code",
            Action::RunShell(_) => "run_shell",
            Action::ReadFile(_) => "read_file",
            Action::WriteFile(_) => "write_file",
            Action::EditFile(_) => "edit_file",
            Action::ListFiles(_) => "list_files",
            Action::InstallPackages(_) => "install_packages",
            Action::RunTests(_) => "run_tests",
            Action::Finish(_) => "finish",
        }
    }

    /// The paths the action names, which must stay inside the working directory.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Action::ReadFile(a) => vec![a.path.as_str()],
            Action::WriteFile(a) => vec![a.path.as_str()],
            Action::EditFile(a) => vec![a.path.as_str()],
            Action::ListFiles(a) => a.path.as_deref().into_iter().collect(),
            Action::RunTests(a) => a.path.as_deref().into_iter().collect(),
            Action::Finish(a) => a.files.iter().map(String::as_str).collect(),
            Action::RunCode(_) | Action::RunShell(_) | Action::InstallPackages(_) => Vec::new(),
        }
    }
}

/// Why `path` may not be named: it leaves the working directory (absolute, or through
/// `..`). Symbolic links are the session's to refuse, where the files are.
pub fn outside(path: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Some(format!(
            "`{path}` is absolute: name files relative to the working directory"
        ));
    }
    if path.split(['/', '\\']).any(|part| part == "..") {
        return Some(format!(
            "`{path}` goes through `..`: files outside the working directory cannot be reached"
        ));
    }
    if path.contains('\0') {
        return Some("a path cannot hold a NUL character".to_owned());
    }
    None
}

/// Files and their contents, for a listing.
pub type Files = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema() {
        let specs = specs();
        assert_eq!(specs.len(), NAMES.len());
        for spec in &specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        }
        let run_code = specs.iter().find(|s| s.name == "run_code").unwrap();
        let mut required: Vec<&str> = run_code.parameters["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["code", "language"]);
    }

    #[test]
    fn calls_are_read_strictly() {
        assert_eq!(
            read("run_shell", r#"{"command": "ls"}"#).unwrap(),
            Action::RunShell(RunShell {
                command: "ls".into(),
                timeout_ms: None
            })
        );
        assert_eq!(
            read("list_files", "").unwrap(),
            Action::ListFiles(ListFiles { path: None })
        );
        let unknown = read("rm_rf", "{}").unwrap_err();
        assert!(unknown.contains("there is no tool `rm_rf`"), "{unknown}");
        assert!(unknown.contains("run_shell"), "{unknown}");
        let extra = read("run_shell", r#"{"command": "ls", "sudo": true}"#).unwrap_err();
        assert!(extra.contains("unknown field `sudo`"), "{extra}");
        let missing = read("write_file", r#"{"path": "a"}"#).unwrap_err();
        assert!(missing.contains("missing field `content`"), "{missing}");
        let not_json = read("run_shell", "{command: ls}").unwrap_err();
        assert!(not_json.contains("do not fit its schema"), "{not_json}");
    }

    #[test]
    fn paths_stay_inside() {
        assert!(outside("src/a.py").is_none());
        assert!(outside("./a.py").is_none());
        assert!(outside("/etc/passwd").is_some());
        assert!(outside("a/../../etc/passwd").is_some());
        assert!(outside("..").is_some());
        assert!(outside("a\\..\\b").is_some());
    }
}
