//! A session's container: a container of its own (never pooled, never reused), with every
//! hardening of the pool's, whose kernel keeps its state between cells. The worker's end of
//! protocol "session/3"; the container's end is `sandbox-images/common/codegen_session.py`.
//!
//! Frames as the runner's (a 4-byte big-endian length, then JSON). The container says
//! `ready` once its kernel is up; then one request at a time, each answered before the next:
//! `cell`, `put_file`, `get_file`, `list_files`, `checkpoint` and, as the first request of a
//! container that takes over a lost session, `restore`. A `fatal` answer means the kernel is
//! gone and the container exits: the session is over.
//!
//! A checkpoint's state is the kernel's own format, opaque here: only a `restore` in the same
//! image reads it, in the same session's container (it may be a pickle of the program's
//! objects: it is never read outside the sandbox).

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bollard::container::LogOutput;
use futures::{Stream, StreamExt};
use proto::Language;
use proto::api::sessions::{CellResult, SessionFile, Unrestorable};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::protocol::{FrameDecoder, encode_frame};

pub(crate) type Output =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
pub(crate) type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// The protocol the container must announce.
pub const SESSION_PROTOCOL: &str = "session/3";

/// Time past a cell's deadline the container has to answer: its kernel gets 2 s to stop at
/// the interrupt, then everything of the program is killed and it answers `fatal`.
const CELL_GRACE: Duration = Duration::from_secs(10);

/// Time a file or listing request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of the container's stderr kept for diagnostics.
const DIAGNOSTICS: usize = 4096;

/// Why a session call did not give its answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The kernel refused the request (a bad path, a file too large); the session goes on.
    #[error("{0}")]
    Refused(String),
    /// The file asked for does not exist; the session goes on.
    #[error("{0}")]
    NoFile(String),
    /// The kernel is gone (the memory limit, a cell that did not stop at its deadline, an
    /// `exit` in bash, a container that stopped answering): the session is over.
    #[error("the session ended: {reason}")]
    Dead { reason: String, oom_killed: bool },
}

/// One session's kernel, in its container.
#[async_trait]
pub trait Session: Send {
    /// Runs a cell: its deadline is the container's to enforce (it interrupts the cell).
    /// With `then`, the checkpoint it asks for is taken right after, in the same request (a
    /// round trip through the Docker engine less than [`Session::checkpoint`] after it).
    async fn run_cell(
        &mut self,
        code: &str,
        timeout: Duration,
        max_output_bytes: u64,
        then: Option<CheckpointAsk>,
    ) -> Result<CellDone, SessionError>;

    /// Writes a file below the working directory, as the program's user.
    async fn put_file(&mut self, path: &str, bytes: &[u8]) -> Result<(), SessionError>;

    /// Reads a file below the working directory (at most `max_bytes`).
    async fn get_file(&mut self, path: &str, max_bytes: u64) -> Result<Vec<u8>, SessionError>;

    /// The regular files below the working directory.
    async fn list_files(&mut self) -> Result<Vec<SessionFile>, SessionError>;

    /// The kernel's state and working directory as they are now, at most `max_bytes`
    /// (a too-large checkpoint is [`SessionError::Refused`]). Unless `full`, a part unchanged
    /// since the last checkpoint it answered is left out.
    async fn checkpoint(&mut self, max_bytes: u64, full: bool) -> Result<Snapshot, SessionError>;

    /// Restores a checkpoint into this fresh session (its first request): what did not come
    /// back. `cells`: the cells the state is after (the next cell is numbered after them).
    async fn restore(
        &mut self,
        state: &[u8],
        files: Option<&[u8]>,
        cells: u64,
    ) -> Result<Vec<Unrestorable>, SessionError>;

    /// Ends the session: its container is removed.
    async fn close(self: Box<Self>);

    /// The container's id, for logs.
    fn container(&self) -> &str;
}

/// A checkpoint asked for: at most `max_bytes`; unless `full`, the parts unchanged since the
/// last checkpoint answered are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CheckpointAsk {
    pub max_bytes: u64,
    pub full: bool,
}

/// A cell's result, and the checkpoint asked for with it (`None`: none was); an error of the
/// checkpoint is its own, the cell's result stands.
#[derive(Debug)]
pub struct CellDone {
    pub result: CellResult,
    pub checkpoint: Option<Result<Snapshot, SessionError>>,
}

/// A checkpoint as the kernel answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The kernel's state; `None`: unchanged since the last checkpoint.
    pub state: Option<Vec<u8>>,
    /// A tar of the working directory; `None`: unchanged since the last checkpoint.
    pub files: Option<Vec<u8>>,
    /// What the state does not hold, and why.
    pub unrestorable: Vec<Unrestorable>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Command<'a> {
    Cell {
        code: &'a str,
        timeout_ms: u64,
        max_output_bytes: u64,
        checkpoint: Option<CheckpointAsk>,
    },
    PutFile {
        path: &'a str,
        base64: String,
    },
    GetFile {
        path: &'a str,
        max_bytes: u64,
    },
    ListFiles,
    Checkpoint {
        max_bytes: u64,
        full: bool,
    },
    Restore {
        state: String,
        files: Option<String>,
        cells: u64,
    },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Message {
    Ready {
        protocol: String,
        #[allow(dead_code)] // the image's own name, for diagnostics
        #[serde(default)]
        language: String,
    },
    CellResult(Box<CellResult>),
    Ok,
    File {
        base64: String,
    },
    Files {
        files: Vec<SessionFile>,
    },
    Checkpoint {
        state: Option<String>,
        files: Option<String>,
        #[allow(dead_code)] // the decoded parts' sizes are their lengths
        #[serde(default)]
        state_bytes: u64,
        #[allow(dead_code)]
        #[serde(default)]
        files_bytes: u64,
        #[serde(default)]
        skipped: Vec<Unrestorable>,
    },
    Restored {
        #[serde(default)]
        skipped: Vec<Unrestorable>,
    },
    Error {
        message: String,
        #[serde(default)]
        missing: bool,
    },
    Fatal {
        message: String,
        #[serde(default)]
        oom_killed: bool,
    },
}

/// The container's side, attached. Dropping it without [`Session::close`] leaves the
/// container to its `auto_remove`: its stdin closes with the attach connection, the kernel
/// reads EOF and exits.
pub(crate) struct Kernel {
    pub id: String,
    pub language: Language,
    input: Input,
    output: Output,
    frames: FrameDecoder,
    diagnostics: Vec<u8>,
    /// Why the session is over, once it is.
    dead: Option<SessionError>,
    /// Removes the container.
    remove: Option<Box<dyn FnOnce(String) -> futures::future::BoxFuture<'static, ()> + Send>>,
}

impl Kernel {
    pub(crate) fn new(
        id: String,
        language: Language,
        input: Input,
        output: Output,
        max_frame: usize,
        remove: Box<dyn FnOnce(String) -> futures::future::BoxFuture<'static, ()> + Send>,
    ) -> Self {
        Self {
            id,
            language,
            input,
            output,
            frames: FrameDecoder::new(max_frame),
            diagnostics: Vec::new(),
            dead: None,
            remove: Some(remove),
        }
    }

    fn diagnostics(&self) -> String {
        String::from_utf8_lossy(&self.diagnostics).trim().to_owned()
    }

    /// Waits for `ready`: an error names what the container said instead.
    pub(crate) async fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        match self.next(Instant::now() + within).await {
            Ok(Message::Ready { protocol, .. }) if protocol == SESSION_PROTOCOL => Ok(()),
            Ok(Message::Ready { protocol, .. }) => Err(format!(
                "the image speaks session protocol {protocol:?}, this worker {SESSION_PROTOCOL:?}: rebuild it with sandbox-images/build {}",
                self.language
            )),
            Ok(Message::Fatal { message, .. }) => Err(message),
            Ok(_) => Err("the session container answered before it was ready".into()),
            Err(
                SessionError::Dead { reason, .. }
                | SessionError::Refused(reason)
                | SessionError::NoFile(reason),
            ) => Err(format!("{reason} {}", self.diagnostics())),
        }
    }

    async fn next(&mut self, deadline: Instant) -> Result<Message, SessionError> {
        loop {
            match self.frames.next_frame() {
                Err(e) => return Err(self.died(format!("protocol error: {e}"), false)),
                Ok(Some(body)) => {
                    return match serde_json::from_slice::<Message>(&body) {
                        Ok(Message::Fatal {
                            message,
                            oom_killed,
                        }) => Err(self.died(message, oom_killed)),
                        Ok(message) => Ok(message),
                        Err(e) => Err(self.died(format!("unreadable answer: {e}"), false)),
                    };
                }
                Ok(None) => {}
            }
            match tokio::time::timeout_at(deadline, self.output.next()).await {
                Err(_) => {
                    return Err(self.died("the session container stopped answering".into(), false));
                }
                Ok(None) => {
                    return Err(self.died("the session container is gone".into(), false));
                }
                Ok(Some(Err(e))) => return Err(self.died(format!("docker: {e}"), false)),
                Ok(Some(Ok(LogOutput::StdOut { message }))) => self.frames.push(&message),
                Ok(Some(Ok(LogOutput::StdErr { message }))) => {
                    self.diagnostics.extend_from_slice(&message);
                    if self.diagnostics.len() > DIAGNOSTICS {
                        let cut = self.diagnostics.len() - DIAGNOSTICS;
                        self.diagnostics.drain(..cut);
                    }
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    fn died(&mut self, reason: String, oom_killed: bool) -> SessionError {
        let error = SessionError::Dead { reason, oom_killed };
        self.dead = Some(error.clone());
        error
    }

    /// Sends one request and reads its answer, by `deadline`.
    async fn call(
        &mut self,
        command: &Command<'_>,
        deadline: Instant,
    ) -> Result<Message, SessionError> {
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        let frame = encode_frame(command);
        let sent = tokio::time::timeout_at(deadline, async {
            self.input.write_all(&frame).await?;
            self.input.flush().await
        })
        .await;
        match sent {
            Err(_) => return Err(self.died("the session container stopped reading".into(), false)),
            Ok(Err(e)) => return Err(self.died(format!("writing to the session: {e}"), false)),
            Ok(Ok(())) => {}
        }
        self.answer(deadline).await
    }

    /// Reads the answer to the request sent last, by `deadline`.
    async fn answer(&mut self, deadline: Instant) -> Result<Message, SessionError> {
        match self.next(deadline).await? {
            Message::Error {
                message,
                missing: true,
            } => Err(SessionError::NoFile(message)),
            Message::Error { message, .. } => Err(SessionError::Refused(message)),
            message => Ok(message),
        }
    }

    /// A checkpoint's answer, decoded.
    fn snapshot(&mut self, answer: Message) -> Result<Snapshot, SessionError> {
        match answer {
            Message::Checkpoint {
                state,
                files,
                skipped,
                ..
            } => {
                let mut decode = |part: Option<String>, what: &str| {
                    part.map(|b| {
                        STANDARD.decode(b.as_bytes()).map_err(|e| {
                            self.died(format!("a checkpoint's {what} is not base64: {e}"), false)
                        })
                    })
                    .transpose()
                };
                let state = decode(state, "state")?;
                let files = decode(files, "files")?;
                Ok(Snapshot {
                    state,
                    files,
                    unrestorable: skipped,
                })
            }
            _ => Err(self.unexpected("something else than a checkpoint")),
        }
    }

    fn unexpected(&mut self, what: &str) -> SessionError {
        self.died(
            format!("the session container answered {what} out of turn"),
            false,
        )
    }
}

#[async_trait]
impl Session for Kernel {
    async fn run_cell(
        &mut self,
        code: &str,
        timeout: Duration,
        max_output_bytes: u64,
        then: Option<CheckpointAsk>,
    ) -> Result<CellDone, SessionError> {
        let command = Command::Cell {
            code,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            max_output_bytes,
            checkpoint: then,
        };
        let result = match self
            .call(&command, Instant::now() + timeout + CELL_GRACE)
            .await?
        {
            Message::CellResult(result) => *result,
            _ => return Err(self.unexpected("something else than a cell's result")),
        };
        let checkpoint = match then {
            None => None,
            Some(_) => {
                let answer = self.answer(Instant::now() + REQUEST_TIMEOUT).await;
                Some(answer.and_then(|message| self.snapshot(message)))
            }
        };
        Ok(CellDone { result, checkpoint })
    }

    async fn put_file(&mut self, path: &str, bytes: &[u8]) -> Result<(), SessionError> {
        let command = Command::PutFile {
            path,
            base64: STANDARD.encode(bytes),
        };
        match self
            .call(&command, Instant::now() + REQUEST_TIMEOUT)
            .await?
        {
            Message::Ok => Ok(()),
            _ => Err(self.unexpected("something else than ok")),
        }
    }

    async fn get_file(&mut self, path: &str, max_bytes: u64) -> Result<Vec<u8>, SessionError> {
        let command = Command::GetFile { path, max_bytes };
        match self
            .call(&command, Instant::now() + REQUEST_TIMEOUT)
            .await?
        {
            Message::File { base64 } => STANDARD
                .decode(base64.as_bytes())
                .map_err(|e| self.died(format!("a file's content is not base64: {e}"), false)),
            _ => Err(self.unexpected("something else than a file")),
        }
    }

    async fn list_files(&mut self) -> Result<Vec<SessionFile>, SessionError> {
        match self
            .call(&Command::ListFiles, Instant::now() + REQUEST_TIMEOUT)
            .await?
        {
            Message::Files { files } => Ok(files),
            _ => Err(self.unexpected("something else than a listing")),
        }
    }

    async fn checkpoint(&mut self, max_bytes: u64, full: bool) -> Result<Snapshot, SessionError> {
        let command = Command::Checkpoint { max_bytes, full };
        let answer = self
            .call(&command, Instant::now() + REQUEST_TIMEOUT)
            .await?;
        self.snapshot(answer)
    }

    async fn restore(
        &mut self,
        state: &[u8],
        files: Option<&[u8]>,
        cells: u64,
    ) -> Result<Vec<Unrestorable>, SessionError> {
        let command = Command::Restore {
            state: STANDARD.encode(state),
            files: files.map(|f| STANDARD.encode(f)),
            cells,
        };
        match self
            .call(&command, Instant::now() + REQUEST_TIMEOUT)
            .await?
        {
            Message::Restored { skipped } => Ok(skipped),
            _ => Err(self.unexpected("something else than a restore's answer")),
        }
    }

    async fn close(mut self: Box<Self>) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.input.shutdown()).await;
        if let Some(remove) = self.remove.take() {
            remove(self.id.clone()).await;
        }
    }

    fn container(&self) -> &str {
        &self.id[..self.id.len().min(12)]
    }
}
