//! `codegen agent`: an agent job (`"mode": "agent"`) from the command line. Submits the task
//! (and a folder's files), shows the run's steps live as its events arrive, then a summary of
//! how it ended; `--out` writes the files it finished with.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::Context;
use proto::agent::{AgentEnd, AgentSettings};
use proto::api::{ErrorBody, JobAccepted};
use proto::job::{JobResult, JobSubmission, Mode};

use crate::client::{Api, follow, wait_final};
use crate::report::duration;

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// What the agent is to do, in plain language.
    pub task: String,
    /// The language of the agent's session: python, python-sci, javascript or bash (default:
    /// the one the task names, else python).
    #[arg(long)]
    pub language: Option<String>,
    /// A folder whose regular files (every one below it, by its path relative to DIR) are put
    /// in the agent's working directory before its first step. Symbolic links and files that
    /// are not UTF-8 text are skipped with a warning; at most 100 files and 1 MiB in all.
    #[arg(long, value_name = "DIR")]
    pub files: Option<PathBuf>,
    /// Most model steps (1 to 500; coordinator default 50).
    #[arg(long)]
    pub max_steps: Option<u32>,
    /// Most wall time of the run in seconds (coordinator default 600).
    #[arg(long)]
    pub max_seconds: Option<u64>,
    /// Sent to the model with every step (OpenAI `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Sent to the model with every step (0 to 2), over the worker's `model.temperature`.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Print the finished job's result as JSON (as `GET /v1/jobs/{id}` answers it) instead of
    /// the summary.
    #[arg(long)]
    pub json: bool,
    /// Write the files the run finished with (those `finish` named) under DIR (made if
    /// missing; a path that would leave DIR is refused).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// How much `--files` sends: the coordinator's own bounds (`files`: at most 100; their bytes:
/// its default `coordinator.max_code_bytes`, 1 MiB).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    files: usize,
    bytes: u64,
}

const BOUNDS: Bounds = Bounds {
    files: 100,
    bytes: 1 << 20,
};

/// What `--files DIR` read: the files by relative path (`/`-separated), and the warnings of
/// what it left out.
#[derive(Debug, Default)]
struct Gathered {
    files: BTreeMap<String, String>,
    bytes: u64,
    skipped: Vec<String>,
}

/// Every regular file below `root`, by its path relative to it. Symbolic links (to files or
/// folders, inside or out), other special files, files that are not UTF-8, names the API
/// would refuse and `.git` folders are left out with a warning; more files or bytes than
/// `bounds` is an error.
fn gather(root: &Path, bounds: Bounds) -> anyhow::Result<Gathered> {
    let meta = std::fs::metadata(root).with_context(|| format!("reading {}", root.display()))?;
    anyhow::ensure!(meta.is_dir(), "--files {}: not a folder", root.display());
    let mut gathered = Gathered::default();
    // Folders still to read: where, and their path relative to `root` ("" for `root`).
    let mut folders = vec![(root.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = folders.pop() {
        let mut entries = std::fs::read_dir(&folder)
            .with_context(|| format!("reading {}", folder.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("reading {}", folder.display()))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        // Pushed in reverse, so the folders are read (and warned about) in name order.
        let mut below = Vec::new();
        for entry in entries {
            let shown = entry.path().display().to_string();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                gathered
                    .skipped
                    .push(format!("{shown}: its name is not UTF-8, skipped"));
                continue;
            };
            if name.contains('\\') {
                gathered
                    .skipped
                    .push(format!("{shown}: a `\\` in its name, skipped"));
                continue;
            }
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let kind = entry
                .file_type()
                .with_context(|| format!("reading {shown}"))?;
            if kind.is_symlink() {
                gathered
                    .skipped
                    .push(format!("{path}: a symbolic link, skipped"));
            } else if kind.is_dir() {
                if name == ".git" {
                    gathered
                        .skipped
                        .push(format!("{path}/: a Git folder, skipped"));
                } else {
                    below.push((entry.path(), path));
                }
            } else if !kind.is_file() {
                gathered
                    .skipped
                    .push(format!("{path}: not a regular file, skipped"));
            } else {
                let size = entry
                    .metadata()
                    .with_context(|| format!("reading {shown}"))?;
                if size.len() > bounds.bytes {
                    gathered.skipped.push(format!(
                        "{path}: {} bytes, over the {} bytes --files sends in all, skipped",
                        size.len(),
                        bounds.bytes
                    ));
                    continue;
                }
                let bytes =
                    std::fs::read(entry.path()).with_context(|| format!("reading {shown}"))?;
                let Ok(text) = String::from_utf8(bytes) else {
                    gathered
                        .skipped
                        .push(format!("{path}: not UTF-8 text, skipped"));
                    continue;
                };
                gathered.bytes += text.len() as u64;
                anyhow::ensure!(
                    gathered.bytes <= bounds.bytes,
                    "--files {}: more than {} bytes of files (the most an agent job takes by \
                     default, coordinator.max_code_bytes); give a smaller folder",
                    root.display(),
                    bounds.bytes
                );
                gathered.files.insert(path, text);
                anyhow::ensure!(
                    gathered.files.len() <= bounds.files,
                    "--files {}: more than {} files (the most an agent job takes); give a \
                     smaller folder",
                    root.display(),
                    bounds.files
                );
            }
        }
        folders.extend(below.into_iter().rev());
    }
    Ok(gathered)
}

/// Where the result's file `name` goes under `root`, or why it does not: only a relative
/// path of plain names, through no symbolic link already there.
fn out_path(root: &Path, name: &str) -> Result<PathBuf, String> {
    if name.is_empty() || name.contains('\0') || name.contains('\\') {
        return Err(format!("{name:?} is not a plain relative path"));
    }
    let mut at = root.to_path_buf();
    for component in Path::new(name).components() {
        let Component::Normal(part) = component else {
            return Err(format!("{name:?} would leave {}", root.display()));
        };
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!(
                "{name:?} goes through {}, a symbolic link",
                at.display()
            ));
        }
    }
    Ok(at)
}

/// Writes `files` under `root`; returns how many were written. A name that would leave
/// `root` is refused with a warning.
fn write_out(root: &Path, files: &BTreeMap<String, String>) -> anyhow::Result<usize> {
    std::fs::create_dir_all(root).with_context(|| format!("making {}", root.display()))?;
    let mut written = 0;
    for (name, content) in files {
        let path = match out_path(root, name) {
            Ok(path) => path,
            Err(why) => {
                eprintln!("codegen: warning: not writing {why}");
                continue;
            }
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("making {}", parent.display()))?;
        }
        std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
        written += 1;
    }
    Ok(written)
}

/// The error of a refused request: the coordinator's message, code and the field it names.
fn refused(status: reqwest::StatusCode, body: &[u8]) -> anyhow::Error {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(body) => {
            let mut message = format!(
                "the coordinator refused the agent job ({status}): {} [{}",
                body.error,
                body.code.as_str()
            );
            if let Some(param) = &body.param {
                let _ = write!(message, ", param `{param}`");
            }
            message.push(']');
            anyhow::anyhow!(message)
        }
        Err(_) => crate::client::refusal(status, body),
    }
}

/// The summary of a finished run: how it ended, the answer, the files, what it spent.
fn summary(result: &JobResult) -> String {
    let mut out = String::new();
    let Some(agent) = &result.agent else {
        let _ = writeln!(
            out,
            "❌ {}: {} (job {}; no agent outcome)",
            result.status,
            result.failure.as_deref().unwrap_or("no reason given"),
            result.job_id
        );
        return out;
    };
    if agent.ended_by == AgentEnd::Finished {
        let _ = writeln!(
            out,
            "✅ finished: ended_by finished (job {})",
            result.job_id
        );
    } else {
        let why = result
            .failure
            .as_deref()
            .and_then(|f| f.lines().next())
            .unwrap_or("no reason given");
        let _ = writeln!(
            out,
            "❌ {}: ended_by {}: {why} (job {})",
            result.status,
            agent.ended_by.as_str(),
            result.job_id
        );
    }
    match agent.answer.as_deref().map(str::trim) {
        Some(answer) if !answer.is_empty() => {
            let _ = writeln!(out, "answer:");
            for line in answer.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        _ => {
            let _ = writeln!(out, "answer: none");
        }
    }
    let _ = writeln!(out, "files ({}):", agent.files.len());
    for (name, content) in &agent.files {
        let _ = writeln!(out, "  {name} ({} bytes)", content.len());
    }
    if !agent.missing.is_empty() {
        let _ = writeln!(out, "missing ({}):", agent.missing.len());
        for (name, why) in &agent.missing {
            let _ = writeln!(out, "  {name}: {why}");
        }
    }
    let t = &agent.totals;
    let _ = writeln!(
        out,
        "totals: {} steps, {} tool calls, {} model calls, {} tokens ({} prompt + {} completion), \
         sandbox CPU {}, wall {}, resumed {}",
        t.steps,
        t.tool_calls,
        t.model_calls,
        t.prompt_tokens + t.completion_tokens,
        t.prompt_tokens,
        t.completion_tokens,
        duration(t.sandbox_cpu_ms),
        duration(t.wall_ms),
        t.resumed
    );
    let _ = writeln!(out, "session: {}", agent.session_id);
    out
}

/// `codegen agent`: exits 0 when the run finished (the model called `finish`), 1 when it
/// ended otherwise, 2 when the coordinator could not be used.
pub async fn agent(args: AgentArgs) -> anyhow::Result<u8> {
    let files = match &args.files {
        None => None,
        Some(dir) => {
            let gathered = gather(dir, BOUNDS)?;
            for warning in &gathered.skipped {
                eprintln!("codegen: warning: {warning}");
            }
            eprintln!(
                "sending {} files ({} bytes) from {}",
                gathered.files.len(),
                gathered.bytes,
                dir.display()
            );
            Some(gathered.files)
        }
    };
    let settings = AgentSettings {
        max_steps: args.max_steps,
        max_seconds: args.max_seconds,
        seed: args.seed,
        temperature: args.temperature,
        ..AgentSettings::default()
    };
    let submission = JobSubmission {
        instruction: args.task.clone(),
        language: args.language.clone(),
        constraints: None,
        test_requirements: None,
        max_iterations: None,
        candidates: None,
        max_tokens_total: None,
        callback_url: None,
        mode: Some(Mode::Agent),
        code: None,
        error: None,
        goals: None,
        files,
        agent: (settings != AgentSettings::default()).then_some(settings),
        memory: None,
    };
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let started = std::time::Instant::now();
    let response = api
        .send_creating(api.http.post(api.url("/v1/jobs")).json(&submission), None)
        .await?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .context("reading the coordinator's answer")?;
    if !status.is_success() {
        return Err(refused(status, &body));
    }
    let unexpected = "the coordinator's answer to POST /v1/jobs has an unexpected shape";
    let result = if status == reqwest::StatusCode::ACCEPTED {
        let accepted: JobAccepted = serde_json::from_slice(&body).context(unexpected)?;
        let id = accepted.job_id;
        eprintln!("job {id} accepted");
        if let Err(e) = follow(&api, id, started, false).await {
            eprintln!("codegen: the event stream was interrupted ({e:#}); polling instead");
        }
        wait_final(&api, id).await?
    } else {
        Box::new(serde_json::from_slice::<JobResult>(&body).context(unexpected)?)
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", summary(&result));
    }
    if let (Some(dir), Some(agent)) = (&args.out, &result.agent) {
        let written = write_out(dir, &agent.files)?;
        eprintln!(
            "wrote {written} of {} files to {}",
            agent.files.len(),
            dir.display()
        );
    }
    let finished = result
        .agent
        .as_ref()
        .is_some_and(|a| a.ended_by == AgentEnd::Finished);
    Ok(if finished { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, content: &[u8]) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    #[test]
    fn every_regular_file_below_the_folder_by_its_relative_path() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.py", b"print(1)\n");
        write(dir.path(), "data/deep/n.txt", b"1 2 3\n");
        write(dir.path(), "blob.bin", &[0xff, 0xfe, 0x00]);
        write(dir.path(), ".git/HEAD", b"ref: refs/heads/main\n");
        let gathered = gather(dir.path(), BOUNDS).unwrap();
        assert_eq!(
            gathered.files.keys().collect::<Vec<_>>(),
            ["a.py", "data/deep/n.txt"]
        );
        assert_eq!(gathered.files["data/deep/n.txt"], "1 2 3\n");
        assert_eq!(gathered.bytes, 15);
        assert_eq!(
            gathered.skipped,
            [
                ".git/: a Git folder, skipped",
                "blob.bin: not UTF-8 text, skipped"
            ]
        );
    }

    #[test]
    fn symbolic_links_are_skipped_inside_or_out() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", b"secret");
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "kept.txt", b"kept");
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        };
        link(&outside.path().join("secret.txt"), "escape.txt");
        link(outside.path(), "escape-dir");
        link(&dir.path().join("kept.txt"), "again.txt");
        link(Path::new("../../etc/passwd"), "dotdot");
        let gathered = gather(dir.path(), BOUNDS).unwrap();
        assert_eq!(gathered.files.keys().collect::<Vec<_>>(), ["kept.txt"]);
        assert!(!gathered.files.values().any(|c| c.contains("secret")));
        assert_eq!(gathered.skipped.len(), 4, "{:?}", gathered.skipped);
        assert!(
            gathered
                .skipped
                .iter()
                .all(|w| w.ends_with(": a symbolic link, skipped")),
            "{:?}",
            gathered.skipped
        );
    }

    #[test]
    fn the_bounds_are_kept_and_said() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.txt", &[b'a'; 60]);
        write(dir.path(), "b.txt", &[b'b'; 60]);
        write(dir.path(), "huge.txt", &[b'h'; 200]);
        let bounds = Bounds {
            files: 10,
            bytes: 100,
        };
        let e = gather(dir.path(), bounds).unwrap_err().to_string();
        assert!(e.contains("more than 100 bytes of files"), "{e}");
        std::fs::remove_file(dir.path().join("b.txt")).unwrap();
        let gathered = gather(dir.path(), bounds).unwrap();
        assert_eq!(gathered.files.keys().collect::<Vec<_>>(), ["a.txt"]);
        assert_eq!(
            gathered.skipped,
            ["huge.txt: 200 bytes, over the 100 bytes --files sends in all, skipped"]
        );
        let e = gather(
            dir.path(),
            Bounds {
                files: 0,
                bytes: 1000,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than 0 files"), "{e}");
        let e = gather(&dir.path().join("a.txt"), BOUNDS)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a folder"), "{e}");
    }

    #[test]
    fn a_result_path_that_leaves_the_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        for bad in [
            "",
            "../x",
            "a/../../x",
            "/etc/passwd",
            "./a",
            "a\\b",
            "link/x",
            "link",
        ] {
            assert!(out_path(dir.path(), bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            out_path(dir.path(), "src/a.py").unwrap(),
            dir.path().join("src/a.py")
        );
        let files: BTreeMap<String, String> = [
            ("src/a.py", "print(1)\n"),
            ("../escaped.txt", "no"),
            ("link/escaped.txt", "no"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(write_out(dir.path(), &files).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/a.py")).unwrap(),
            "print(1)\n"
        );
        assert!(!dir.path().parent().unwrap().join("escaped.txt").exists());
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_refusal_names_its_message_code_and_field() {
        let body = serde_json::json!({
            "error": "agent.temperature: must be between 0 and 2",
            "code": "invalid_field",
            "param": "agent.temperature",
        });
        let e = refused(
            reqwest::StatusCode::UNPROCESSABLE_ENTITY,
            body.to_string().as_bytes(),
        )
        .to_string();
        assert!(e.contains("422"), "{e}");
        assert!(
            e.contains("agent.temperature: must be between 0 and 2 [invalid_field, param `agent.temperature`]"),
            "{e}"
        );
    }
}
