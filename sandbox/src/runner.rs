//! One started container with its runner, attached: the worker's end of the runner protocol.

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use futures::{Stream, StreamExt};
use proto::{ExecutionRequest, Language};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::protocol::{
    FrameDecoder, PROTOCOL, RunnerCommand, RunnerMessage, RunnerRequest, RunnerResult, encode_frame,
};

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// Bytes of the runner's stderr kept for diagnostics.
const DIAGNOSTICS: usize = 4096;

/// Why a runner cannot be used (any more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No answer by the deadline.
    Wedged,
    /// The stream ended: the container is gone.
    Closed,
    /// The runner said something that breaks the protocol.
    Protocol(String),
    /// The runner gave up on the container (and exits).
    Fatal { message: String, oom_killed: bool },
    /// The runner refused the request as malformed (the container is fine).
    Refused(String),
    /// Talking to Docker failed.
    Docker(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Wedged => f.write_str("the runner did not answer in time"),
            Failure::Closed => f.write_str("the container's output ended (it died)"),
            Failure::Protocol(m) => write!(f, "runner protocol error: {m}"),
            Failure::Fatal { message, .. } => write!(f, "the runner gave up: {message}"),
            Failure::Refused(m) => write!(f, "the runner refused the request: {m}"),
            Failure::Docker(m) => write!(f, "docker: {m}"),
        }
    }
}

/// A container whose runner announced itself, with its attached stdin and stdout.
pub(crate) struct Runner {
    pub id: String,
    pub language: Language,
    /// Memory limit the container has now, in MiB.
    pub memory_mb: u64,
    /// Executions it has run.
    pub runs: u64,
    /// It answered a run with a result and waits for `prepare` before it gets ready again.
    unprepared: bool,
    input: Input,
    output: Output,
    frames: FrameDecoder,
    diagnostics: Vec<u8>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("id", &self.id)
            .field("language", &self.language)
            .field("memory_mb", &self.memory_mb)
            .field("runs", &self.runs)
            .finish()
    }
}

impl Runner {
    pub fn new(
        id: String,
        language: Language,
        memory_mb: u64,
        input: Input,
        output: Output,
        max_frame: usize,
    ) -> Self {
        Self {
            id,
            language,
            memory_mb,
            runs: 0,
            unprepared: false,
            input,
            output,
            frames: FrameDecoder::new(max_frame),
            diagnostics: Vec::new(),
        }
    }

    /// The short container id, for logs.
    pub fn short_id(&self) -> &str {
        &self.id[..self.id.len().min(12)]
    }

    /// What the runner wrote to stderr lately (diagnostics only).
    pub fn diagnostics(&self) -> String {
        String::from_utf8_lossy(&self.diagnostics).trim().to_owned()
    }

    async fn next_message(&mut self, deadline: Instant) -> Result<RunnerMessage, Failure> {
        loop {
            if let Some(body) = self.frames.next_frame().map_err(Failure::Protocol)? {
                return serde_json::from_slice(&body)
                    .map_err(|e| Failure::Protocol(format!("unreadable message: {e}")));
            }
            match tokio::time::timeout_at(deadline, self.output.next()).await {
                Err(_) => return Err(Failure::Wedged),
                Ok(None) => return Err(Failure::Closed),
                Ok(Some(Err(e))) => return Err(Failure::Docker(e.to_string())),
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

    /// Whether the runner waits for [`Runner::wait_ready`] to tell it to prepare (after a
    /// result; not after a refused request, which leaves its program process as it was).
    pub fn unprepared(&self) -> bool {
        self.unprepared
    }

    /// Waits for `ready`: at start-up and after every execution, once the container is clean.
    /// After a result the runner is first told to prepare: only now does it fork and prepare
    /// its next program process (it killed what was left of the last one at once).
    pub async fn wait_ready(&mut self, within: Duration) -> Result<(), Failure> {
        if self.unprepared {
            let frame = encode_frame(&RunnerCommand::Prepare);
            match tokio::time::timeout(within, async {
                self.input.write_all(&frame).await?;
                self.input.flush().await
            })
            .await
            {
                Err(_) => return Err(Failure::Wedged),
                Ok(Err(e)) => return Err(Failure::Docker(format!("writing to the runner: {e}"))),
                Ok(Ok(())) => self.unprepared = false,
            }
        }
        match self.next_message(Instant::now() + within).await? {
            RunnerMessage::Ready { protocol, runs } if protocol == PROTOCOL => {
                if runs == self.runs {
                    Ok(())
                } else {
                    Err(Failure::Protocol(format!(
                        "the runner counts {runs} executions, we sent {}",
                        self.runs
                    )))
                }
            }
            RunnerMessage::Ready { protocol, .. } => Err(Failure::Protocol(format!(
                "the runner speaks protocol {protocol}, not {PROTOCOL}: rebuild the image with \
                 sandbox-images/build"
            ))),
            RunnerMessage::Fatal {
                message,
                oom_killed,
            } => Err(Failure::Fatal {
                message,
                oom_killed,
            }),
            other => Err(Failure::Protocol(format!(
                "expected ready, got {}",
                kind(&other)
            ))),
        }
    }

    /// Sends one request and waits for its result (not for the `ready` after it).
    pub async fn execute(
        &mut self,
        request: &ExecutionRequest,
        max_output_bytes: u64,
        output_limit: u64,
        grace: Duration,
    ) -> Result<RunnerResult, Failure> {
        // A compile runs first under its own limit (plus the runner's grace for it).
        let compile = request.compile_timeout_ms.map_or(Duration::ZERO, |ms| {
            Duration::from_millis(ms) + Duration::from_secs(2)
        });
        let deadline = Instant::now() + Duration::from_millis(request.timeout_ms) + compile + grace;
        let frame = encode_frame(&RunnerRequest::new(request, max_output_bytes, output_limit));
        self.runs += 1;
        let sent = tokio::time::timeout_at(deadline, async {
            self.input.write_all(&frame).await?;
            self.input.flush().await
        })
        .await;
        match sent {
            Err(_) => return Err(Failure::Wedged),
            Ok(Err(e)) => return Err(Failure::Docker(format!("writing to the runner: {e}"))),
            Ok(Ok(())) => {}
        }
        match self.next_message(deadline).await? {
            RunnerMessage::Result(result) => {
                self.unprepared = true;
                Ok(*result)
            }
            RunnerMessage::Error { message } => Err(Failure::Refused(message)),
            RunnerMessage::Fatal {
                message,
                oom_killed,
            } => Err(Failure::Fatal {
                message,
                oom_killed,
            }),
            other => Err(Failure::Protocol(format!(
                "expected a result, got {}",
                kind(&other)
            ))),
        }
    }

    /// Closes the runner's stdin: it finishes the current state and exits.
    pub async fn close(&mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.input.shutdown()).await;
    }
}

fn kind(message: &RunnerMessage) -> &'static str {
    match message {
        RunnerMessage::Ready { .. } => "ready",
        RunnerMessage::Result(_) => "a result",
        RunnerMessage::Error { .. } => "an error",
        RunnerMessage::Fatal { .. } => "fatal",
    }
}
