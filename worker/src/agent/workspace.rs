//! A run's session and what its tools do there. The session is held by the worker that runs
//! the loop (its calls never leave the process); a run taken again elsewhere restores it from
//! its checkpoint, on the worker that takes it. Every tool but the file ones is a bash command
//! run as a fresh process in the working directory, sent as a cell of the session's kernel;
//! the cell's call id is the tool call's own, so a call the session ran before its worker was
//! lost is not run twice.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proto::Language;
use proto::api::sessions::{CellResult, SessionState};
use proto::job::JobMeta;
use proto::session::{
    CellOutcome, OpenSession, RestoreSession, RunCell, SessionEnd, SessionRecord,
};

use super::tools::{self, Action};
use crate::sessions::{LocalSessions, Refusal};

/// Why a run cannot go on in its session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session ended, or could not be opened or restored: the run fails with it.
    #[error("{0}")]
    Lost(String),
    /// Redis did not answer: the task goes back and is taken again.
    #[error("the session's record: {0}")]
    Store(#[from] store::Error),
}

/// The largest file a tool reads back or `finish` returns.
const MAX_READ_BYTES: u64 = 4 << 20;
/// The most a finished run's files hold together (they are kept with the job's result).
const MAX_RESULT_BYTES: usize = 8 << 20;
/// A command's deadline when the call names none (mini-swe-agent's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Most packages one call installs.
const MAX_PACKAGES: usize = 50;
/// Output of one command kept by the session (its observation is cut further).
const MAX_OUTPUT_BYTES: u64 = 1 << 20;

/// The run's session.
#[derive(Debug)]
pub struct Workspace {
    sessions: LocalSessions,
    pub id: String,
    language: Language,
    open: OpenSession,
}

/// What a call got back.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub content: String,
    pub error: bool,
    pub cpu_ms: u64,
}

/// A finished run's files: contents, and why the others could not be read.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    pub files: tools::Files,
    pub missing: tools::Files,
}

/// The session id of job `meta`'s run.
pub fn session_id(meta: &JobMeta) -> String {
    proto::agent::session_id(meta.id)
}

impl Workspace {
    /// The run's session, held here: opened (and its files put) on the run's first take,
    /// found where this worker holds it, or restored here from its checkpoint. `packages`: what
    /// the run installed so far (a restore installs them again).
    pub async fn ready(
        sessions: &LocalSessions,
        meta: &JobMeta,
        packages: Vec<String>,
    ) -> Result<Self, Error> {
        let request = meta
            .request
            .agent
            .as_ref()
            .ok_or_else(|| Error::Lost("the job is not an agent job".into()))?;
        let id = session_id(meta);
        let open = OpenSession {
            language: meta.request.language,
            memory_mb: request.memory_mb,
            tenant: meta.tenant.clone(),
            packages,
        };
        let workspace = Self {
            sessions: sessions.clone(),
            id: id.clone(),
            language: meta.request.language,
            open,
        };
        let store = sessions.store();
        match store.session(&id).await? {
            None => {
                workspace.create(meta, request).await?;
                Ok(workspace)
            }
            Some(record) if record.state != SessionState::Live => Err(Error::Lost(format!(
                "the agent's session has ended: {}",
                record.ended_reason.as_deref().unwrap_or("ended")
            ))),
            Some(record) if record.host == sessions.host() && sessions.holds(&id) => Ok(workspace),
            Some(record) => {
                let restore = RestoreSession {
                    open: workspace.open.clone(),
                    lost_host: record.host.clone(),
                    reason: "its agent's run was taken again by another worker".into(),
                };
                match sessions.restore(&id, &restore).await {
                    Ok(restored) => {
                        tracing::info!(session = %id, lost = %record.host, after_cell = restored.as_ref().map_or(0, |r| r.after_cell), "agent session restored");
                        Ok(workspace)
                    }
                    Err(refusal) => {
                        let why = format!(
                            "the agent's session could not be restored after its worker {} was lost: {refusal}",
                            record.host
                        );
                        workspace
                            .sessions
                            .end(&record, &SessionEnd::WorkerLost { why: why.clone() })
                            .await;
                        Err(Error::Lost(why))
                    }
                }
            }
        }
    }

    /// Records and opens the session, then puts the job's files into it.
    async fn create(
        &self,
        meta: &JobMeta,
        request: &proto::agent::AgentRequest,
    ) -> Result<(), Error> {
        let now = proto::now_ms();
        // Its record lives as long as the run may: the loop's calls keep it busy, and the
        // run ends it.
        let lifetime_ms = request.limits.max_seconds.saturating_mul(1000) + 60_000;
        let record = SessionRecord {
            id: self.id.clone(),
            tenant: meta.tenant.clone(),
            language: self.language,
            memory_mb: self.open.memory_mb,
            idle_timeout_s: request.limits.max_seconds + 60,
            packages: Vec::new(),
            created_ms: now,
            expires_ms: meta.submitted_at_ms.max(now).saturating_add(lifetime_ms),
            last_used_ms: now,
            busy_until_ms: 0,
            cells: 0,
            state: SessionState::Live,
            ended_reason: None,
            ended_by: None,
            host: self.sessions.host().to_owned(),
            host_url: self.sessions.url().to_owned(),
            restores: 0,
            last_restore: None,
        };
        // The tenant's session quota is for its own sessions; the job was admitted already.
        self.sessions.store().create_session(&record, 0).await?;
        if let Err(refusal) = self.sessions.open(&self.id, &self.open).await {
            let why = format!("the agent's session could not start: {refusal}");
            self.sessions
                .end(&record, &SessionEnd::NotStarted { why: why.clone() })
                .await;
            return Err(Error::Lost(why));
        }
        for (path, content) in &request.files {
            if let Err(refusal) = self
                .sessions
                .put_file(&self.id, path, content.clone().into_bytes())
                .await
            {
                let why =
                    format!("the job's file {path} could not be put into the session: {refusal}");
                self.end("its job's files could not be put into it").await;
                return Err(Error::Lost(why));
            }
        }
        tracing::info!(session = %self.id, files = request.files.len(), "agent session opened");
        Ok(())
    }

    /// Ends the session (the run is over) and removes its container.
    pub async fn end(&self, how: &str) {
        if let Ok(Some(record)) = self.sessions.store().session(&self.id).await {
            self.sessions
                .end(
                    &record,
                    &SessionEnd::Deleted {
                        how: how.to_owned(),
                    },
                )
                .await;
        }
        self.sessions.close(&self.id).await;
    }

    /// Carries out `action` (call `call_id`), within `left` of the run's time.
    pub async fn carry_out(
        &mut self,
        call_id: &str,
        action: &Action,
        left: Duration,
    ) -> Result<Observed, Error> {
        if let Some(why) = action.paths().into_iter().find_map(tools::outside) {
            return Ok(failed(why));
        }
        match action {
            Action::RunShell(a) => {
                let timeout = timeout_of(a.timeout_ms, left);
                self.shell(call_id, &a.command, None, timeout).await
            }
            Action::RunCode(a) => {
                let Some(interpreter) = interpreter(&a.language) else {
                    return Ok(failed(format!(
                        "run_code runs python, javascript or bash, not {}",
                        a.language
                    )));
                };
                let timeout = timeout_of(a.timeout_ms, left);
                // The program's file is named in the environment, so its text needs no
                // quoting; its stdin is the call's.
                let command = format!("{interpreter} \"$CODEGEN_PROGRAM\"");
                self.shell_with(
                    call_id,
                    &command,
                    Some(&a.code),
                    a.stdin.as_deref(),
                    timeout,
                )
                .await
            }
            Action::RunTests(a) => {
                let path = a.path.as_deref().unwrap_or(".");
                let command = tests_command(self.language, path);
                self.shell(call_id, &command, None, timeout_of(None, left))
                    .await
            }
            Action::ReadFile(a) => Ok(self.read(a).await),
            Action::WriteFile(a) => Ok(
                match self
                    .sessions
                    .put_file(&self.id, &a.path, a.content.clone().into_bytes())
                    .await
                {
                    Ok(()) => done(format!("wrote {} ({} bytes)", a.path, a.content.len())),
                    Err(refusal) => self.refused(refusal).await?,
                },
            ),
            Action::EditFile(a) => Ok(self.edit(a).await),
            Action::ListFiles(a) => Ok(match self.sessions.list_files(&self.id).await {
                Ok(files) => {
                    let prefix = a
                        .path
                        .as_deref()
                        .map(|p| p.trim_start_matches("./").trim_end_matches('/'))
                        .filter(|p| !p.is_empty() && *p != ".");
                    let lines: Vec<String> = files
                        .iter()
                        .filter(|f| {
                            prefix
                                .is_none_or(|p| f.path == p || f.path.starts_with(&format!("{p}/")))
                        })
                        .map(|f| format!("{} ({} bytes)", f.path, f.size))
                        .collect();
                    if lines.is_empty() {
                        done("no files".into())
                    } else {
                        done(lines.join("\n"))
                    }
                }
                Err(refusal) => self.refused(refusal).await?,
            }),
            Action::InstallPackages(a) => self.install(a).await,
            Action::Finish(_) => Ok(done("finished".into())),
        }
    }

    /// Installs `a.names` (besides what the run installed before): the session reopens with
    /// them, from its checkpoint.
    async fn install(&mut self, a: &tools::InstallPackages) -> Result<Observed, Error> {
        if !matches!(self.language, Language::Python | Language::PythonSci) {
            return Ok(failed(format!(
                "packages are offered in python sessions only, not {}",
                self.language
            )));
        }
        if a.names.is_empty() || a.names.len() > MAX_PACKAGES {
            return Ok(failed(format!("name 1 to {MAX_PACKAGES} packages")));
        }
        let mut open = self.open.clone();
        for name in &a.names {
            if !open.packages.contains(name) {
                open.packages.push(name.clone());
            }
        }
        match self.sessions.reinstall(&self.id, &open).await {
            Ok(()) => {
                self.open = open;
                Ok(done(format!(
                    "installed {}; the session's names and files are as they were",
                    a.names.join(", ")
                )))
            }
            Err(refusal) => match refusal.error.code {
                proto::session::HostErrorCode::Package => Ok(failed(refusal.to_string())),
                // The old container is gone once the new one failed: the session with it.
                _ if !self.sessions.holds(&self.id) => Err(Error::Lost(format!(
                    "the agent's session could not be reopened with its packages: {refusal}"
                ))),
                _ => Ok(failed(refusal.to_string())),
            },
        }
    }

    /// The files `finish` named.
    pub async fn collect(&self, paths: &[String]) -> Collected {
        let mut collected = Collected::default();
        let mut total = 0;
        for path in paths {
            if let Some(why) = tools::outside(path) {
                collected.missing.insert(path.clone(), why);
                continue;
            }
            match self.sessions.get_file(&self.id, path, MAX_READ_BYTES).await {
                Ok(bytes) if total + bytes.len() > MAX_RESULT_BYTES => {
                    collected.missing.insert(
                        path.clone(),
                        format!("the result's files would pass {MAX_RESULT_BYTES} bytes with it"),
                    );
                }
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => {
                        total += text.len();
                        collected.files.insert(path.clone(), text);
                    }
                    Err(_) => {
                        collected
                            .missing
                            .insert(path.clone(), "not UTF-8 text".into());
                    }
                },
                Err(refusal) => {
                    collected.missing.insert(path.clone(), refusal.to_string());
                }
            }
        }
        collected
    }

    async fn read(&self, a: &tools::ReadFile) -> Observed {
        let bytes = match self
            .sessions
            .get_file(&self.id, &a.path, MAX_READ_BYTES)
            .await
        {
            Ok(bytes) => bytes,
            Err(refusal) => return failed(refusal.to_string()),
        };
        let text = String::from_utf8_lossy(&bytes);
        let offset = a.offset.unwrap_or(1).max(1) as usize;
        let lines: Vec<&str> = text.lines().collect();
        let take = a.limit.map_or(usize::MAX, |l| l as usize);
        let shown: Vec<&str> = lines.iter().skip(offset - 1).take(take).copied().collect();
        if a.offset.is_none() && a.limit.is_none() {
            return done(text.into_owned());
        }
        let last = offset - 1 + shown.len();
        done(format!(
            "{}\n[lines {offset}-{last} of {}]",
            shown.join("\n"),
            lines.len()
        ))
    }

    async fn edit(&self, a: &tools::EditFile) -> Observed {
        if a.old.is_empty() {
            return failed("`old` is empty: give the text to replace".into());
        }
        let text = match self
            .sessions
            .get_file(&self.id, &a.path, MAX_READ_BYTES)
            .await
        {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => return failed(format!("{} is not UTF-8 text", a.path)),
            },
            Err(refusal) => return failed(refusal.to_string()),
        };
        match text.matches(a.old.as_str()).count() {
            0 => failed(format!("`old` does not occur in {}", a.path)),
            1 => {
                let edited = text.replacen(a.old.as_str(), &a.new, 1);
                match self
                    .sessions
                    .put_file(&self.id, &a.path, edited.into_bytes())
                    .await
                {
                    Ok(()) => done(format!("edited {}", a.path)),
                    Err(refusal) => failed(refusal.to_string()),
                }
            }
            n => failed(format!(
                "`old` occurs {n} times in {}: give more of the text around it",
                a.path
            )),
        }
    }

    async fn shell(
        &mut self,
        call_id: &str,
        command: &str,
        stdin: Option<&str>,
        timeout: Duration,
    ) -> Result<Observed, Error> {
        self.shell_with(call_id, command, None, stdin, timeout)
            .await
    }

    /// `command` under bash as a fresh process (`program` in `$CODEGEN_PROGRAM`'s file, `stdin`
    /// in `$CODEGEN_STDIN`'s), as a cell of the kernel's language.
    async fn shell_with(
        &mut self,
        call_id: &str,
        command: &str,
        program: Option<&str>,
        stdin: Option<&str>,
        timeout: Duration,
    ) -> Result<Observed, Error> {
        let cell = RunCell {
            code: shell_cell(self.language, command, program, stdin, timeout),
            // The command stops itself at `timeout`; the cell gets a margin past it.
            timeout_ms: u64::try_from((timeout + Duration::from_secs(5)).as_millis())
                .unwrap_or(u64::MAX),
            max_output_bytes: MAX_OUTPUT_BYTES,
            call: call_id.to_owned(),
        };
        // The record says the session is busy until the command's deadline, and counts the
        // cell once it ran (what a coordinator does for a caller's cell).
        let now = proto::now_ms();
        let busy_until = now.saturating_add(cell.timeout_ms);
        self.sessions
            .store()
            .touch_session(&self.id, now, false, busy_until)
            .await?;
        let outcome = self.sessions.cell(&self.id, cell).await;
        if let Ok(CellOutcome::Ran(_)) = &outcome {
            self.sessions
                .store()
                .touch_session(&self.id, proto::now_ms(), true, 0)
                .await?;
        }
        match outcome {
            Ok(CellOutcome::Ran(result)) => Ok(observed(&result, timeout)),
            Ok(CellOutcome::AlreadyRan) => Ok(failed(
                "this call ran before the run's worker was lost, and its output was lost with \
                 it; its effects on the files are kept: run a command to see them if you need to"
                    .into(),
            )),
            Ok(CellOutcome::Died { reason, .. }) => {
                Err(Error::Lost(format!("the agent's session died: {reason}")))
            }
            Err(refusal) => self.refused(refusal).await,
        }
    }

    /// A refusal of the session: the call's error when it is about the call (a missing
    /// file), the run's end when the session is gone.
    async fn refused(&self, refusal: Refusal) -> Result<Observed, Error> {
        use proto::session::HostErrorCode as Code;
        match refusal.error.code {
            Code::Invalid | Code::NoFile | Code::Package => Ok(failed(refusal.to_string())),
            _ => Err(Error::Lost(format!("the agent's session: {refusal}"))),
        }
    }
}

fn done(content: String) -> Observed {
    Observed {
        content,
        error: false,
        cpu_ms: 0,
    }
}

fn failed(content: String) -> Observed {
    Observed {
        content,
        error: true,
        cpu_ms: 0,
    }
}

fn timeout_of(asked_ms: Option<u64>, left: Duration) -> Duration {
    asked_ms
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
        .min(left)
        .max(Duration::from_secs(1))
}

fn interpreter(language: &str) -> Option<&'static str> {
    match language {
        "python" | "python3" | "python-sci" => Some("python3"),
        "javascript" | "js" | "node" => Some("node"),
        "bash" | "sh" | "shell" => Some("bash"),
        _ => None,
    }
}

/// The test runner's command over `path`, for the session's language.
fn tests_command(language: Language, path: &str) -> String {
    let path = shell_quote(path);
    match language {
        Language::Javascript => format!("node --test {path}"),
        Language::Bash => format!(
            "status=0; for t in $(if [ -d {path} ]; then find {path} -name 'test_*.sh' | sort; else echo {path}; fi); do echo \"== $t\"; bash \"$t\" || status=1; done; exit $status"
        ),
        _ => format!(
            "if python3 -c 'import pytest' 2>/dev/null; then python3 -m pytest -q -p no:cacheprovider {path}; \
             elif [ -d {path} ]; then python3 -m unittest discover -v -s {path}; \
             else python3 -m unittest -v {path}; fi"
        ),
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Kills every process of this uid but this shell's ancestors (the kernel), in passes until
/// none is left (bounded): bash builtins only.
const SCRUB: &str = "keep=' '; p=$$; while [ \"${p:-0}\" -gt 0 ]; do keep=\"$keep$p \"; \
    read -r line < /proc/$p/stat || break; set -- ${line##*) }; p=$2; done; \
    for pass in 1 2 3 4 5 6 7 8 9 10; do found=; for d in /proc/[0-9]*; do pid=${d#/proc/}; \
    case \"$keep\" in *\" $pid \"*) continue ;; esac; uid=; state=; \
    while read -r k v _; do case $k in State:) state=$v ;; Uid:) uid=$v; break ;; esac; done < \"$d/status\" 2>/dev/null; \
    [ \"$uid\" = \"$UID\" ] && [ \"$state\" != Z ] && kill -9 \"$pid\" 2>/dev/null && found=1; done; \
    [ -z \"$found\" ] && break; done;";

/// A cell of `language`'s kernel that runs `command` under bash as a fresh process, bounded
/// by `timeout` (coreutils' `timeout`, the whole process group), and answers its exit code:
/// everything is passed base64-encoded, so no text needs quoting in any kernel's syntax.
fn shell_cell(
    language: Language,
    command: &str,
    program: Option<&str>,
    stdin: Option<&str>,
    timeout: Duration,
) -> String {
    let b64 = |text: &str| STANDARD.encode(text.as_bytes());
    // The files the command reads its program and stdin from live outside the working
    // directory (nothing the agent lists), and go with the command.
    // The command's output goes to files, not the kernel's pipes, and once it has ended every
    // process of the program's uid it left (a fork bomb's children, a daemon, anything that
    // left its process group) is killed, as an execution's are: all but the kernel, which is
    // this wrapper's ancestry. A command ends when it ends, never when the last process holding
    // its output does, and nothing it starts outlives it. The scrub uses builtins only: it
    // must work while the pids limit is exhausted. The session's packages (mounted at
    // `PACKAGES_DIR`, on the kernel's path) are on every command's Python path too.
    let script = format!(
        "[ -d {packages} ] && export PYTHONPATH={packages}${{PYTHONPATH:+:$PYTHONPATH}}; \
         dir=$(mktemp -d); printf %s '{program}' | base64 -d > \"$dir/program\"; \
         printf %s '{stdin}' | base64 -d > \"$dir/stdin\"; \
         CODEGEN_PROGRAM=\"$dir/program\" CODEGEN_STDIN=\"$dir/stdin\" timeout -k 2 {secs} bash -c \"$(printf %s '{command}' | base64 -d)\" < \"$dir/stdin\" > \"$dir/out\" 2> \"$dir/err\"; \
         code=$?; {SCRUB} \
         head -c {max} \"$dir/out\"; head -c {max} \"$dir/err\" >&2; rm -rf \"$dir\"; \
         [ $code -eq 124 ] && echo \"[timed out after {secs} s]\" >&2; exit $code",
        program = b64(program.unwrap_or("")),
        stdin = b64(stdin.unwrap_or("")),
        command = b64(command),
        secs = timeout.as_secs().max(1),
        max = MAX_OUTPUT_BYTES,
        packages = sandbox::PACKAGES_DIR,
    );
    let encoded = b64(&script);
    match language {
        Language::Bash => format!("bash -c \"$(printf %s '{encoded}' | base64 -d)\""),
        Language::Javascript => format!(
            "(() => {{ const r = require('child_process').spawnSync('bash', ['-c', Buffer.from('{encoded}', 'base64').toString()], {{ encoding: 'utf8', maxBuffer: 1 << 24 }}); process.stdout.write(r.stdout || ''); process.stderr.write(r.stderr || ''); return r.status === null ? 128 : r.status; }})()"
        ),
        _ => format!(
            "(lambda r: (__import__('sys').stdout.write(r.stdout), __import__('sys').stderr.write(r.stderr), r.returncode)[2])(__import__('subprocess').run(['bash', '-c', __import__('base64').b64decode('{encoded}').decode()], capture_output=True, text=True, errors='replace'))"
        ),
    }
}

/// A command's cell as the model reads it: its exit code, stdout and stderr.
fn observed(result: &CellResult, timeout: Duration) -> Observed {
    use proto::api::sessions::CellStatus;
    let code = result
        .exit_code
        .or_else(|| result.value.as_deref().and_then(|v| v.trim().parse().ok()));
    let mut content = String::new();
    match (result.status, code) {
        (CellStatus::Timeout, _) => {
            content.push_str(&format!("[timed out after {} s]\n", timeout.as_secs()));
        }
        (_, Some(code)) => content.push_str(&format!("exit code: {code}\n")),
        (_, None) => {}
    }
    if let Some(error) = &result.error {
        content.push_str(&format!("error: {}: {}\n", error.ty, error.message));
    }
    if !result.stdout.is_empty() {
        content.push_str("stdout:\n");
        content.push_str(&result.stdout);
        if !result.stdout.ends_with('\n') {
            content.push('\n');
        }
    }
    if !result.stderr.is_empty() {
        content.push_str("stderr:\n");
        content.push_str(&result.stderr);
        if !result.stderr.ends_with('\n') {
            content.push('\n');
        }
    }
    if result.stdout_truncated || result.stderr_truncated {
        content.push_str(&format!(
            "[output past {MAX_OUTPUT_BYTES} bytes was dropped]\n"
        ));
    }
    Observed {
        content,
        error: result.status != CellStatus::Ok || code.is_some_and(|c| c != 0),
        cpu_ms: result.cpu_ms.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_cell_quotes_nothing_it_is_given() {
        let hostile = "echo '$(rm -rf /)' \"`x`\" \\ ;";
        for language in [Language::Python, Language::Javascript, Language::Bash] {
            let cell = shell_cell(
                language,
                hostile,
                Some("print('x')"),
                Some("in"),
                DEFAULT_TIMEOUT,
            );
            assert!(!cell.contains("rm -rf"), "{language}: {cell}");
            assert!(!cell.contains("print("), "{language}: {cell}");
        }
    }

    #[test]
    fn tests_commands_quote_the_path() {
        let command = tests_command(Language::Python, "it's");
        assert!(command.contains("'it'\\''s'"), "{command}");
    }
}
