//! Packages for sessions, installed offline: a session's requirements are resolved to wheels by
//! pip on the worker's side (never in the sandbox, which has no network), from the index the
//! operator configured, and only names the operator allows. Each wheel is kept once, named by
//! its SHA-256 (`{cache}/wheels/`); each set of requirements is installed once into a folder
//! (`{cache}/sets/{key}/`, `key` the SHA-256 of the requirements and where they come from),
//! which the session's container mounts read-only at `/opt/packages`. A second session with
//! the same requirements mounts the same folder: no download, no install.
//!
//! Only wheels (`--only-binary=:all:`): building a source distribution would run its code on
//! the worker. pip resolves for the sandbox image's Python (`python_version`, `platforms`),
//! not the worker's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Package settings (`[worker.sessions.packages]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PackageOptions {
    /// A PEP 503 index (pip's `--index-url`) to take wheels from.
    pub index_url: String,
    /// Or a folder or page of wheel files (pip's `--find-links`, with `--no-index`).
    pub find_links: String,
    /// Project names that may be installed, as glob patterns (`sympy`, `scikit-*`): every
    /// requested package and every dependency must match one. Empty: none.
    pub allow: Vec<String>,
    /// Where wheels and installed sets are kept. A worker in a container must see it at the
    /// same path as the Docker engine does (the session containers mount from it).
    pub cache_dir: PathBuf,
    /// The pip to run: its command and first arguments.
    pub pip: Vec<String>,
    /// The sandbox images' Python and platforms, for pip's resolution.
    pub python_version: String,
    pub platforms: Vec<String>,
    /// Bytes a set of wheels may take, downloaded.
    pub max_bytes: u64,
    /// Time pip may take to resolve and download a set.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for PackageOptions {
    fn default() -> Self {
        Self {
            index_url: String::new(),
            find_links: String::new(),
            allow: Vec::new(),
            cache_dir: PathBuf::from("/tmp/codegen-packages"),
            pip: vec!["python3".into(), "-m".into(), "pip".into()],
            python_version: "3.11".into(),
            platforms: [
                "manylinux_2_36_x86_64",
                "manylinux_2_28_x86_64",
                "manylinux_2_17_x86_64",
                "manylinux2014_x86_64",
                "manylinux2010_x86_64",
                "manylinux1_x86_64",
                "linux_x86_64",
            ]
            .map(String::from)
            .to_vec(),
            max_bytes: 512 << 20,
            timeout: Duration::from_secs(600),
        }
    }
}

/// Why a session's packages could not be installed. Each names the package to blame where
/// there is one; none is worth retrying as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    #[error("packages are not offered in {0}: it has no offline package source")]
    Language(proto::Language),
    #[error(
        "package installs are not configured on this worker (worker.sessions.packages.index_url or find_links)"
    )]
    NotConfigured,
    #[error("{spec:?} is not a requirement this cluster takes: {why}")]
    Invalid { spec: String, why: &'static str },
    #[error("package {name} is not allowed (worker.sessions.packages.allow){because}")]
    NotAllowed { name: String, because: String },
    #[error("installing {specs} failed: {message}")]
    Failed { specs: String, message: String },
}

/// The installed set of a session's requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The folder the session's container mounts.
    pub dir: PathBuf,
    /// The wheels in it (file names).
    pub wheels: Vec<String>,
    /// Found installed already (no pip run).
    pub cached: bool,
}

/// The worker's package cache.
#[derive(Debug)]
pub struct Packages {
    options: PackageOptions,
    /// One install of a set at a time; concurrent sessions with the same set wait for it.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Packages {
    pub fn build(options: PackageOptions) -> Self {
        Self {
            options,
            busy: Mutex::default(),
        }
    }

    /// The set of `specs` for a session in `language`, installed (from the cache when it is
    /// there).
    pub async fn install(
        &self,
        language: proto::Language,
        specs: &[String],
    ) -> Result<Installed, PackageError> {
        if !matches!(
            language,
            proto::Language::Python | proto::Language::PythonSci
        ) {
            return Err(PackageError::Language(language));
        }
        if self.options.index_url.is_empty() && self.options.find_links.is_empty() {
            return Err(PackageError::NotConfigured);
        }
        let mut names = Vec::new();
        for spec in specs {
            let name = requirement_name(spec)?;
            self.check_allowed(&name, "")?;
            names.push(name);
        }
        let mut sorted: Vec<String> = specs.iter().map(|s| s.trim().to_owned()).collect();
        sorted.sort();
        sorted.dedup();
        let key = self.key(&sorted);
        let sets = self.options.cache_dir.join("sets");
        let dir = sets.join(&key);
        let lock = self
            .busy
            .lock()
            .expect("poisoned")
            .entry(key.clone())
            .or_default()
            .clone();
        let _turn = lock.lock().await;
        if let Some(wheels) = read_manifest(&dir) {
            return Ok(Installed {
                dir,
                wheels,
                cached: true,
            });
        }
        let failed = |message: String| PackageError::Failed {
            specs: sorted.join(" "),
            message,
        };
        let io = |what: &str, e: std::io::Error| failed(format!("{what}: {e}"));
        let scratch = sets.join(format!("{key}.partial"));
        let _ = tokio::fs::remove_dir_all(&scratch).await;
        let download = scratch.join("download");
        tokio::fs::create_dir_all(&download)
            .await
            .map_err(|e| io("the package cache", e))?;
        // Resolve and download, for the sandbox's Python, wheels only.
        let mut args: Vec<String> = vec!["download".into(), "--dest".into(), path_arg(&download)];
        args.extend(self.target_args());
        args.extend(self.source_args());
        args.push("--".into());
        args.extend(sorted.iter().cloned());
        self.pip(&args).await.map_err(&failed)?;
        // Every wheel allowed, bounded, and kept by its content.
        let wheels_dir = self.options.cache_dir.join("wheels");
        tokio::fs::create_dir_all(&wheels_dir)
            .await
            .map_err(|e| io("the wheel cache", e))?;
        let mut wheels = Vec::new();
        let mut total = 0u64;
        let mut entries = tokio::fs::read_dir(&download)
            .await
            .map_err(|e| io("the downloads", e))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| io("the downloads", e))?
        {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(project) = wheel_project(&file) else {
                return Err(failed(format!("pip fetched {file}, not a wheel")));
            };
            self.check_allowed(&project, &format!(", a dependency of {}", names.join(", ")))?;
            let bytes = tokio::fs::read(entry.path())
                .await
                .map_err(|e| io(&file, e))?;
            total += bytes.len() as u64;
            if total > self.options.max_bytes {
                return Err(failed(format!(
                    "the wheels are over {} bytes (worker.sessions.packages.max_bytes)",
                    self.options.max_bytes
                )));
            }
            let kept = wheels_dir.join(format!("{}.whl", hex::encode(Sha256::digest(&bytes))));
            if !kept.exists() {
                tokio::fs::write(&kept, &bytes)
                    .await
                    .map_err(|e| io("the wheel cache", e))?;
            }
            wheels.push(file);
        }
        wheels.sort();
        // Installed from the downloaded wheels alone, as pip installs them (data folders,
        // namespace packages), into the set's folder.
        let target = scratch.join("site");
        let mut args: Vec<String> = vec![
            "install".into(),
            "--no-index".into(),
            "--no-deps".into(),
            "--no-compile".into(),
            "--target".into(),
            path_arg(&target),
        ];
        args.extend(self.target_args());
        args.push("--".into());
        args.extend(wheels.iter().map(|w| path_arg(&download.join(w))));
        self.pip(&args).await.map_err(&failed)?;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        tokio::fs::rename(&target, &dir)
            .await
            .map_err(|e| io("the installed set", e))?;
        let _ = tokio::fs::remove_dir_all(&scratch).await;
        // Written last: a set without it is not complete.
        tokio::fs::write(
            dir.join(MANIFEST),
            serde_json::to_vec(&wheels).expect("names serialize"),
        )
        .await
        .map_err(|e| io("the installed set", e))?;
        Ok(Installed {
            dir,
            wheels,
            cached: false,
        })
    }

    fn check_allowed(&self, name: &str, because: &str) -> Result<(), PackageError> {
        if self
            .options
            .allow
            .iter()
            .any(|pattern| wildmatch::WildMatch::new(&normalize(pattern)).matches(name))
        {
            Ok(())
        } else {
            Err(PackageError::NotAllowed {
                name: name.to_owned(),
                because: because.to_owned(),
            })
        }
    }

    fn key(&self, specs: &[String]) -> String {
        let mut hash = Sha256::new();
        for part in [
            &self.options.index_url,
            &self.options.find_links,
            &self.options.python_version,
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        for part in self.options.platforms.iter().chain(specs) {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hex::encode(hash.finalize())[..32].to_owned()
    }

    /// pip's options for the sandbox's interpreter rather than the worker's.
    fn target_args(&self) -> Vec<String> {
        let version = &self.options.python_version;
        let mut args = vec![
            "--only-binary=:all:".into(),
            "--python-version".into(),
            version.clone(),
            "--implementation".into(),
            "cp".into(),
        ];
        for platform in &self.options.platforms {
            args.push("--platform".into());
            args.push(platform.clone());
        }
        args
    }

    fn source_args(&self) -> Vec<String> {
        if self.options.index_url.is_empty() {
            vec![
                "--no-index".into(),
                "--find-links".into(),
                self.options.find_links.clone(),
            ]
        } else {
            let mut args = vec!["--index-url".into(), self.options.index_url.clone()];
            if !self.options.find_links.is_empty() {
                args.push("--find-links".into());
                args.push(self.options.find_links.clone());
            }
            args
        }
    }

    /// Runs pip with `args`: its last words when it fails.
    async fn pip(&self, args: &[String]) -> Result<(), String> {
        let (program, first) = self
            .options
            .pip
            .split_first()
            .ok_or_else(|| "worker.sessions.packages.pip is empty".to_owned())?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(first)
            .args(["--disable-pip-version-check", "--no-input", "--quiet"])
            .arg("--cache-dir")
            .arg(self.options.cache_dir.join("pip"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(self.options.timeout, command.output())
            .await
            .map_err(|_| {
                format!(
                    "pip did not finish within {} s (worker.sessions.packages.timeout)",
                    self.options.timeout.as_secs()
                )
            })?
            .map_err(|e| format!("pip ({program}) could not run: {e}"))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.contains("No matching distribution"))
            .collect();
        Err(if said.is_empty() {
            stderr
                .trim()
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect()
        } else {
            said.join(" ")
        })
    }
}

/// The file a complete set holds: its wheels' names.
const MANIFEST: &str = ".codegen-wheels.json";

fn read_manifest(dir: &Path) -> Option<Vec<String>> {
    serde_json::from_slice(&std::fs::read(dir.join(MANIFEST)).ok()?).ok()
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A project name as PEP 503 compares them: lowercase, runs of `-`, `_`, `.` as one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut separator = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            separator = true;
            continue;
        }
        if separator && !out.is_empty() {
            out.push('-');
        }
        separator = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The normalized project name of a requirement: `name`, `name[extra]`, and version
/// specifiers (`==1.12`, `>=1,<2`). Nothing pip would read as an option, a URL, a path or a
/// marker.
pub fn requirement_name(spec: &str) -> Result<String, PackageError> {
    let invalid = |why| PackageError::Invalid {
        spec: spec.to_owned(),
        why,
    };
    let spec = spec.trim();
    if spec.is_empty() || spec.len() > 200 {
        return Err(invalid("empty, or over 200 characters"));
    }
    let name_end = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(spec.len());
    let name = &spec[..name_end];
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err(invalid("a requirement starts with a project name"));
    }
    let mut rest = spec[name_end..].trim_start();
    if let Some(extras) = rest.strip_prefix('[') {
        let Some(close) = extras.find(']') else {
            return Err(invalid("an unclosed [extras]"));
        };
        if !extras[..close]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ',' | ' '))
        {
            return Err(invalid("extras are names"));
        }
        rest = extras[close + 1..].trim_start();
    }
    for clause in rest.split(',').filter(|_| !rest.is_empty()) {
        let clause = clause.trim();
        let version = ["===", "==", "!=", "<=", ">=", "~=", "<", ">"]
            .iter()
            .find_map(|op| clause.strip_prefix(op))
            .ok_or_else(|| invalid("versions are given as ==, !=, <=, >=, ~=, < or >"))?
            .trim();
        if version.is_empty()
            || !version.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '*' | '+' | '!' | '-' | '_')
            })
        {
            return Err(invalid("a version is digits, letters and . * + ! - _"));
        }
    }
    Ok(normalize(name))
}

/// The normalized project of a wheel's file name (`{name}-{version}(-{build})?-{tags}.whl`).
fn wheel_project(file: &str) -> Option<String> {
    let stem = file.strip_suffix(".whl")?;
    let (name, _) = stem.split_once('-')?;
    Some(normalize(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_name_a_project_and_nothing_pip_would_take_as_more() {
        for (spec, name) in [
            ("sympy==1.12", "sympy"),
            ("SymPy", "sympy"),
            ("scikit_learn>=1.3,<2", "scikit-learn"),
            ("requests[socks] ~= 2.31", "requests"),
            ("zope.interface", "zope-interface"),
        ] {
            assert_eq!(requirement_name(spec).unwrap(), name, "{spec}");
        }
        for bad in [
            "",
            "--index-url=http://elsewhere/",
            "-r requirements.txt",
            "pkg @ http://example.invalid/pkg.whl",
            "./local/path",
            "pkg; os_name == 'nt'",
            "pkg==1.0 --hash=sha256:00",
            "pkg[extra",
            "pkg==",
        ] {
            assert!(
                matches!(requirement_name(bad), Err(PackageError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_allowed_projects_install_and_the_refusal_names_them() {
        let packages = Packages::build(PackageOptions {
            find_links: "/nowhere".into(),
            allow: vec!["sympy".into(), "Scikit_*".into()],
            ..PackageOptions::default()
        });
        assert!(packages.check_allowed("sympy", "").is_ok());
        assert!(packages.check_allowed("scikit-learn", "").is_ok());
        assert_eq!(
            packages.check_allowed("mpmath", ", a dependency of sympy"),
            Err(PackageError::NotAllowed {
                name: "mpmath".into(),
                because: ", a dependency of sympy".into()
            })
        );
        assert_eq!(
            wheel_project("mpmath-1.3.0-py3-none-any.whl").as_deref(),
            Some("mpmath")
        );
        assert_eq!(
            wheel_project("Zope.Interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl").as_deref(),
            Some("zope-interface")
        );
    }

    #[tokio::test]
    async fn a_language_without_a_package_source_or_no_source_configured_is_refused() {
        let none = Packages::build(PackageOptions::default());
        assert_eq!(
            none.install(proto::Language::Bash, &["jq".into()]).await,
            Err(PackageError::Language(proto::Language::Bash))
        );
        assert_eq!(
            none.install(proto::Language::Python, &["sympy".into()])
                .await,
            Err(PackageError::NotConfigured)
        );
    }
}
