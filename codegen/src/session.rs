//! Stateful sessions from the command line: `codegen session open|run|ls|show|rm|put|get|files`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use proto::Language;
use proto::api::sessions::{
    CellResult, CellStatus, SESSION_LANGUAGES, SessionCreate, SessionFiles, SessionList,
    SessionState, SessionView,
};

use crate::client::{Api, read_json, read_text, refusal};

#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    pub action: SessionAction,
    /// Coordinator URL.
    #[arg(
        long,
        global = true,
        env = "CODEGEN_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, global = true, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum SessionAction {
    /// Open a session (a container of its own whose interpreter keeps its state between
    /// cells); prints its id.
    Open {
        /// One of python, python-sci, javascript, bash.
        #[arg(long, default_value = "python")]
        language: String,
        /// The session's memory limit in MiB (coordinator default when omitted).
        #[arg(long)]
        memory_mb: Option<u64>,
        /// Seconds without a call after which the session ends (coordinator default when
        /// omitted).
        #[arg(long)]
        idle_timeout_s: Option<u64>,
        /// Print the session as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// Run a cell: its stdout on stdout, its stderr on stderr, then the value of its final
    /// expression (if any) on stdout.
    Run {
        /// The session id.
        id: String,
        /// The cell's code (`-` reads it from standard input).
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        code: Option<String>,
        /// A file whose contents are the cell's code (`-`: standard input).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The cell's deadline in milliseconds (coordinator default when omitted): at it the
        /// cell is interrupted, the session lives on.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Print the cell's result as JSON instead of its output.
        #[arg(long)]
        json: bool,
    },
    /// List your sessions, newest first (live and ended).
    Ls {
        /// Print the listing as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a session.
    Show {
        /// The session id.
        id: String,
        /// Print the session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a session: its container and everything in it are removed.
    Rm {
        /// The session id.
        id: String,
        /// Print the ended session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Upload a file into the session's working directory.
    Put {
        /// The session id.
        id: String,
        /// The local file (`-`: standard input, REMOTE then required).
        local: PathBuf,
        /// Its path relative to the session's working directory (default: LOCAL's name).
        remote: Option<String>,
    },
    /// Download a file of the session's working directory, its bytes as they are.
    Get {
        /// The session id.
        id: String,
        /// Its path relative to the session's working directory.
        remote: String,
        /// Where to write it (default: REMOTE's name in the current directory; `-`: stdout).
        local: Option<PathBuf>,
    },
    /// List the files of the session's working directory.
    Files {
        /// The session id.
        id: String,
        /// Print the listing as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// One retry of a request the coordinator answered 503 or 429 (after its `Retry-After` at
/// least): session calls carry no `Idempotency-Key`, so a request that may have got through
/// (no answer) is not sent again.
fn session_backoff() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(500))
        .with_max_delay(std::time::Duration::from_secs(10))
        .with_max_times(1)
        .with_jitter()
}

/// `/v1/sessions/{id}` followed by `tail`, each segment percent-encoded.
fn session_url(api: &Api, id: &str, tail: &[&str]) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&api.url("/v1/sessions"))
        .context("the coordinator URL is not a valid URL")?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("the coordinator URL cannot take a path"))?
        .push(id)
        .extend(tail);
    Ok(url)
}

/// A file's path in the session as the coordinator takes it: relative to the working
/// directory, without `.`, `..` or empty segments (a URL would drop them silently).
fn remote_segments(path: &str) -> anyhow::Result<Vec<&str>> {
    let segments: Vec<&str> = path.split('/').collect();
    anyhow::ensure!(
        !path.is_empty()
            && segments
                .iter()
                .all(|s| !s.is_empty() && *s != "." && *s != ".."),
        "{path:?}: a file of a session is named by a relative path below its working directory, without `.`, `..` or empty segments"
    );
    Ok(segments)
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `3.2 s ago` for a time `ms` since the epoch.
fn ago(ms: u64) -> String {
    format!(
        "{} ago",
        crate::report::duration(now_ms().saturating_sub(ms))
    )
}

/// `text` with control characters shown as `?` (a reason may quote a cell's output).
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `codegen session …`: exits 0 on success (`run`: the cell's status is ok), 1 when a cell
/// ended in an error or at its deadline, 2 when the request could not be made or was refused
/// (an unknown session, one that has ended: the coordinator's message is printed).
pub async fn session(args: SessionArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    match args.action {
        SessionAction::Open {
            language,
            memory_mb,
            idle_timeout_s,
            json,
        } => open(&api, &language, memory_mb, idle_timeout_s, json).await,
        SessionAction::Run {
            id,
            code,
            file,
            timeout_ms,
            json,
        } => {
            let code = match (code, file) {
                (Some(code), _) if code == "-" => read_text(Path::new("-"))?,
                (Some(code), _) => code,
                (None, Some(file)) => read_text(&file)?,
                (None, None) => anyhow::bail!("give the cell's code: CODE, --file FILE or -"),
            };
            run(&api, &id, code, timeout_ms, json).await
        }
        SessionAction::Ls { json } => list(&api, json).await,
        SessionAction::Show { id, json } => {
            let response = send(&api, api.http.get(session_url(&api, &id, &[])?)).await?;
            let view = read_session(response).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print_view(&view);
            }
            Ok(0)
        }
        SessionAction::Rm { id, json } => {
            let response = send(&api, api.http.delete(session_url(&api, &id, &[])?)).await?;
            let view = read_session(response).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                println!(
                    "session {}: {} ({})",
                    view.id,
                    view.state.as_str(),
                    printable(view.ended_reason.as_deref().unwrap_or("no reason recorded"))
                );
            }
            Ok(0)
        }
        SessionAction::Put { id, local, remote } => put(&api, &id, &local, remote).await,
        SessionAction::Get { id, remote, local } => get(&api, &id, &remote, local).await,
        SessionAction::Files { id, json } => files(&api, &id, json).await,
    }
}

/// Sends a session call: once more when the coordinator says to try later.
async fn send(api: &Api, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
    api.send_retrying(request, session_backoff(), false).await
}

async fn read_session(response: reqwest::Response) -> anyhow::Result<SessionView> {
    let (_, value) = read_json(response).await?;
    serde_json::from_value(value).context("the coordinator's answer is not a session")
}

async fn open(
    api: &Api,
    language: &str,
    memory_mb: Option<u64>,
    idle_timeout_s: Option<u64>,
    json: bool,
) -> anyhow::Result<u8> {
    let Ok(language) = serde_json::from_value::<Language>(serde_json::json!(language)) else {
        anyhow::bail!(
            "unknown language {language:?} (sessions are offered in {})",
            SESSION_LANGUAGES
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let create = SessionCreate {
        language,
        memory_mb,
        idle_timeout_s,
        packages: Vec::new(),
    };
    let response = send(api, api.http.post(api.url("/v1/sessions")).json(&create)).await?;
    let view = read_session(response).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        println!("{}", view.id);
    }
    Ok(0)
}

async fn run(
    api: &Api,
    id: &str,
    code: String,
    timeout_ms: Option<u64>,
    json: bool,
) -> anyhow::Result<u8> {
    let cell = proto::api::sessions::CellRequest { code, timeout_ms };
    let response = send(
        api,
        api.http.post(session_url(api, id, &["run"])?).json(&cell),
    )
    .await?;
    let (_, value) = read_json(response).await?;
    let result: CellResult =
        serde_json::from_value(value).context("the coordinator's answer is not a cell's result")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_cell(&result)?;
    }
    Ok(match result.status {
        CellStatus::Ok => 0,
        CellStatus::Error | CellStatus::Timeout => 1,
    })
}

/// The cell's output as it wrote it, its text displays and final value on stdout; its error
/// and, unless it ended ok, a summary line on stderr.
fn print_cell(result: &CellResult) -> anyhow::Result<()> {
    if let Some(restore) = &result.restored {
        eprintln!(
            "[the session's worker {} was lost ({}); restored after cell {}{}]",
            restore.lost_worker,
            printable(&restore.reason),
            restore.after_cell,
            unrestorable(&restore.unrestorable)
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(result.stdout.as_bytes())?;
    for display in &result.display {
        match (&display.text, &display.base64) {
            (Some(text), _) => writeln!(out, "{text}")?,
            (None, Some(data)) => eprintln!(
                "[{}: {} bytes of base64; --json has them]",
                display.mime,
                data.len()
            ),
            (None, None) => {}
        }
    }
    if let Some(value) = &result.value {
        writeln!(out, "{value}")?;
    }
    out.flush()?;
    drop(out);
    eprint!("{}", result.stderr);
    for (truncated, stream) in [
        (result.stdout_truncated, "stdout"),
        (result.stderr_truncated, "stderr"),
    ] {
        if truncated {
            eprintln!("[the cell's {stream} was cut at the coordinator's limit]");
        }
    }
    if let Some(error) = &result.error {
        if error.traceback.trim().is_empty() {
            eprintln!("{}: {}", error.ty, error.message);
        } else {
            eprint!("{}", error.traceback);
            if !error.traceback.ends_with('\n') {
                eprintln!();
            }
        }
    }
    if let Some(note) = &result.checkpoint
        && let Some(error) = &note.error
    {
        eprintln!("[no checkpoint: {}]", printable(error));
    }
    let mut summary = match result.status {
        CellStatus::Ok => return Ok(()),
        CellStatus::Error => "status=error".to_owned(),
        CellStatus::Timeout => "status=timeout (interrupted at its deadline)".to_owned(),
    };
    if let Some(code) = result.exit_code {
        summary.push_str(&format!(" exit_code={code}"));
    }
    summary.push_str(&format!(" duration_ms={}", result.duration_ms));
    eprintln!("{summary}; the session lives on");
    Ok(())
}

/// `; not restored: a (why), b (why)`, or nothing.
fn unrestorable(names: &[proto::api::sessions::Unrestorable]) -> String {
    if names.is_empty() {
        return String::new();
    }
    format!(
        "; not restored: {}",
        names
            .iter()
            .map(|u| format!("{} ({})", printable(&u.name), printable(&u.reason)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

async fn list(api: &Api, json: bool) -> anyhow::Result<u8> {
    let response = send(api, api.http.get(api.url("/v1/sessions"))).await?;
    let (_, value) = read_json(response).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(0);
    }
    let list: SessionList =
        serde_json::from_value(value).context("the coordinator's answer is not a listing")?;
    println!(
        "{:<32}  {:<10}  {:<5}  {:>5}  LAST USED",
        "ID", "LANGUAGE", "STATE", "CELLS"
    );
    for view in &list.sessions {
        println!(
            "{:<32}  {:<10}  {:<5}  {:>5}  {}",
            view.id,
            view.language.as_str(),
            view.state.as_str(),
            view.cells,
            ago(view.last_used_ms)
        );
    }
    Ok(0)
}

fn print_view(view: &SessionView) {
    println!("id            {}", view.id);
    println!("language      {}", view.language.as_str());
    println!("state         {}", view.state.as_str());
    if let Some(reason) = &view.ended_reason {
        println!("ended         {}", printable(reason));
    }
    println!("cells         {}", view.cells);
    if let Some(restore) = &view.last_restore {
        println!(
            "restored      {} time(s), last {} after cell {} (worker {} lost{})",
            view.restores,
            ago(restore.restored_ms),
            restore.after_cell,
            restore.lost_worker,
            unrestorable(&restore.unrestorable)
        );
    }
    println!("memory        {} MiB", view.memory_mb);
    println!("idle timeout  {} s", view.idle_timeout_s);
    println!("created       {}", ago(view.created_ms));
    println!("last used     {}", ago(view.last_used_ms));
    if view.state == SessionState::Live {
        println!(
            "ends by       {} from now (its lifetime)",
            crate::report::duration(view.expires_ms.saturating_sub(now_ms()))
        );
    }
}

async fn put(api: &Api, id: &str, local: &Path, remote: Option<String>) -> anyhow::Result<u8> {
    let remote = match remote {
        Some(remote) => remote,
        None if local.as_os_str() == "-" => {
            anyhow::bail!("name the file in the session: codegen session put ID - REMOTE")
        }
        None => local
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{}: name the file in the session", local.display()))?
            .to_owned(),
    };
    let bytes = if local.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .context("reading standard input")?;
        bytes
    } else {
        std::fs::read(local).with_context(|| format!("reading {}", local.display()))?
    };
    let size = bytes.len();
    let mut tail = vec!["files"];
    tail.extend(remote_segments(&remote)?);
    let request = api
        .http
        .put(session_url(api, id, &tail)?)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(bytes);
    let response = send(api, request).await?;
    let status = response.status();
    if !status.is_success() {
        let body = response
            .bytes()
            .await
            .context("reading the coordinator's answer")?;
        return Err(refusal(status, &body));
    }
    eprintln!("{} -> {remote} ({size} bytes)", local.display());
    Ok(0)
}

async fn get(api: &Api, id: &str, remote: &str, local: Option<PathBuf>) -> anyhow::Result<u8> {
    let mut tail = vec!["files"];
    tail.extend(remote_segments(remote)?);
    let response = send(api, api.http.get(session_url(api, id, &tail)?)).await?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .context("reading the coordinator's answer")?;
    if !status.is_success() {
        return Err(refusal(status, &bytes));
    }
    let local = match local {
        Some(local) => local,
        // The last segment: a file of the current directory, whatever folders it was in.
        None => PathBuf::from(remote.rsplit('/').next().unwrap_or(remote)),
    };
    if local.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)
            .context("writing the file to stdout")?;
        out.flush().context("writing the file to stdout")?;
    } else {
        std::fs::write(&local, &bytes).with_context(|| format!("writing {}", local.display()))?;
        eprintln!("{remote} -> {} ({} bytes)", local.display(), bytes.len());
    }
    Ok(0)
}

async fn files(api: &Api, id: &str, json: bool) -> anyhow::Result<u8> {
    let response = send(api, api.http.get(session_url(api, id, &["files"])?)).await?;
    let (_, value) = read_json(response).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(0);
    }
    let files: SessionFiles =
        serde_json::from_value(value).context("the coordinator's answer is not a listing")?;
    println!("{:>10}  {:<16}  PATH", "SIZE", "MODIFIED");
    for file in &files.files {
        println!(
            "{:>10}  {:<16}  {}",
            file.size,
            ago(file.modified_ms),
            printable(&file.path)
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_path_that_a_url_would_change_is_refused_here() {
        for bad in [
            "",
            "../etc/passwd",
            "a/../b",
            "/etc/passwd",
            "a//b",
            "./a",
            "a/",
        ] {
            assert!(remote_segments(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            remote_segments("data/blob.bin").unwrap_or_default(),
            ["data", "blob.bin"]
        );
        assert_eq!(
            remote_segments("..hidden").unwrap_or_default(),
            ["..hidden"]
        );
    }

    #[test]
    fn ids_and_paths_are_escaped_segment_by_segment() {
        let api = Api::new("http://127.0.0.1:8080/", None).unwrap_or_else(|e| panic!("{e}"));
        let url = session_url(&api, "ab/c?d", &["files", "a b", "c%2F#"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/v1/sessions/ab%2Fc%3Fd/files/a%20b/c%252F%23"
        );
    }
}
