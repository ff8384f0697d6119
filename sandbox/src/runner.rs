//! One started container with its runner, attached: the worker's end of the runner protocol.

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use futures::{Stream, StreamExt};
use proto::harness::HarnessRequest;
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
    /// The image's harness does not offer this mode (nothing was sent: the container is fine).
    NoHarness(&'static str),
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
            Failure::NoHarness(mode) => write!(f, "the image's test harness does not offer {mode}"),
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
    /// The harness modes the runner announced in its last `ready`.
    harness: Vec<String>,
    /// It answered a run sent with `rest` and waits for `prepare` before it gets ready again.
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
            harness: Vec::new(),
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

    /// Whether the runner waits for [`Runner::wait_ready`] to tell it to prepare (after the
    /// result of a run sent with `rest`; not after a refused request, which leaves its
    /// program process as it was).
    pub fn unprepared(&self) -> bool {
        self.unprepared
    }

    /// Waits for `ready`: at start-up and after every execution, once the container is clean.
    /// After the result of a run sent with `rest` the runner is first told to prepare: only
    /// now does it fork and prepare its next program process (it killed what was left of the
    /// last one at once).
    pub async fn wait_ready(&mut self, within: Duration) -> Result<(), Failure> {
        if self.unprepared {
            self.send(
                &encode_frame(&RunnerCommand::Prepare),
                Instant::now() + within,
            )
            .await?;
            self.unprepared = false;
        }
        match self.next_message(Instant::now() + within).await? {
            RunnerMessage::Ready {
                protocol,
                runs,
                harness,
            } if protocol == PROTOCOL => {
                if runs == self.runs {
                    self.harness = harness;
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

    /// Sends one request and waits for its result (not for the `ready` after it). With
    /// `rest` the runner then waits for [`Runner::wait_ready`]'s `prepare`; without it, it
    /// prepares at once.
    pub async fn execute(
        &mut self,
        request: &ExecutionRequest,
        harness: Option<&HarnessRequest>,
        max_output_bytes: u64,
        output_limit: u64,
        grace: Duration,
        rest: bool,
    ) -> Result<RunnerResult, Failure> {
        // A compile runs first under its own limit (plus the runner's grace for it).
        let compile = request.compile_timeout_ms.map_or(Duration::ZERO, |ms| {
            Duration::from_millis(ms) + Duration::from_secs(2)
        });
        let deadline = Instant::now() + Duration::from_millis(request.timeout_ms) + compile + grace;
        if let Some(asked) = harness
            && !self.harness.iter().any(|mode| mode == asked.mode())
        {
            return Err(Failure::NoHarness(asked.mode()));
        }
        let frame = encode_frame(&RunnerRequest::new(
            request,
            harness,
            max_output_bytes,
            output_limit,
            rest,
        ));
        self.runs += 1;
        self.send(&frame, deadline).await?;
        match self.next_message(deadline).await? {
            RunnerMessage::Result(result) => {
                self.unprepared = rest;
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

    /// Writes one frame to the runner's stdin by `deadline`.
    async fn send(&mut self, frame: &[u8], deadline: Instant) -> Result<(), Failure> {
        let sent = tokio::time::timeout_at(deadline, async {
            self.input.write_all(frame).await?;
            self.input.flush().await
        })
        .await;
        match sent {
            Err(_) => Err(Failure::Wedged),
            Ok(Err(e)) => Err(Failure::Docker(format!("writing to the runner: {e}"))),
            Ok(Ok(())) => Ok(()),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tokio::io::AsyncReadExt;

    use super::*;

    fn runner(frames: &[serde_json::Value]) -> (Runner, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let output: Vec<Result<LogOutput, bollard::errors::Error>> = frames
            .iter()
            .map(|f| {
                Ok(LogOutput::StdOut {
                    message: encode_frame(f).into(),
                })
            })
            .collect();
        let runner = Runner::new(
            "c0ffee".into(),
            Language::Python,
            256,
            Box::pin(ours),
            Box::pin(futures::stream::iter(output)),
            1 << 20,
        );
        (runner, theirs)
    }

    fn request() -> ExecutionRequest {
        ExecutionRequest {
            language: Language::Python,
            code: "print(1)".into(),
            stdin: None,
            test: None,
            timeout_ms: 1000,
            cpu_time_ms: None,
            compile_timeout_ms: None,
            memory_mb: 256,
            fresh_container: false,
            files: BTreeMap::new(),
            return_files: Vec::new(),
        }
    }

    async fn sent_frames(mut theirs: tokio::io::DuplexStream) -> Vec<serde_json::Value> {
        let mut bytes = Vec::new();
        theirs.read_to_end(&mut bytes).await.unwrap();
        let mut decoder = FrameDecoder::new(1 << 20);
        decoder.push(&bytes);
        std::iter::from_fn(|| decoder.next_frame().unwrap())
            .map(|f| serde_json::from_slice(&f).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn after_a_result_the_runner_is_told_to_prepare_before_it_is_ready() {
        let (mut runner, theirs) = runner(&[
            serde_json::json!({"type": "ready", "protocol": PROTOCOL, "runs": 0}),
            serde_json::json!({"type": "result", "exit_code": 0, "stdout": "1\n"}),
            serde_json::json!({"type": "ready", "protocol": PROTOCOL, "runs": 1}),
        ]);
        runner.wait_ready(Duration::from_secs(5)).await.unwrap();
        assert!(!runner.unprepared());
        let result = runner
            .execute(
                &request(),
                None,
                1 << 20,
                1 << 20,
                Duration::from_secs(1),
                true,
            )
            .await
            .unwrap();
        assert_eq!(result.stdout, "1\n");
        assert!(runner.unprepared());
        runner.wait_ready(Duration::from_secs(5)).await.unwrap();
        assert!(!runner.unprepared());
        drop(runner);
        let sent = sent_frames(theirs).await;
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(
            (&sent[0]["code"], &sent[0]["rest"]),
            (&"print(1)".into(), &true.into())
        );
        assert_eq!(sent[1], serde_json::json!({"type": "prepare"}));
    }

    #[tokio::test]
    async fn without_rest_the_runner_is_ready_after_a_result_unasked() {
        let (mut runner, theirs) = runner(&[
            serde_json::json!({"type": "result", "exit_code": 0, "stdout": "1\n"}),
            serde_json::json!({"type": "ready", "protocol": PROTOCOL, "runs": 1}),
        ]);
        runner
            .execute(
                &request(),
                None,
                1 << 20,
                1 << 20,
                Duration::from_secs(1),
                false,
            )
            .await
            .unwrap();
        assert!(!runner.unprepared());
        runner.wait_ready(Duration::from_secs(5)).await.unwrap();
        drop(runner);
        let sent = sent_frames(theirs).await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(sent[0].get("rest").is_none(), "{sent:?}");
    }

    #[tokio::test]
    async fn a_refused_request_leaves_the_runner_prepared() {
        // After an error answer the runner says ready again by itself (its program process
        // saw nothing): a prepare would be read as the next request.
        let (mut runner, theirs) = runner(&[
            serde_json::json!({"type": "error", "message": "bad files"}),
            serde_json::json!({"type": "ready", "protocol": PROTOCOL, "runs": 1}),
        ]);
        let Err(Failure::Refused(message)) = runner
            .execute(
                &request(),
                None,
                1 << 20,
                1 << 20,
                Duration::from_secs(1),
                true,
            )
            .await
        else {
            panic!("the error answer was not a refusal");
        };
        assert_eq!(message, "bad files");
        assert!(!runner.unprepared());
        runner.wait_ready(Duration::from_secs(5)).await.unwrap();
        drop(runner);
        let sent = sent_frames(theirs).await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["code"], "print(1)");
    }

    #[tokio::test]
    async fn a_harness_mode_the_runner_did_not_announce_is_not_sent() {
        let (mut runner, theirs) = runner(&[serde_json::json!(
            {"type": "ready", "protocol": PROTOCOL, "runs": 0, "harness": ["cases"]}
        )]);
        runner.wait_ready(Duration::from_secs(5)).await.unwrap();
        let many = HarnessRequest::ManyCases { runs: vec![] };
        let Err(Failure::NoHarness(mode)) = runner
            .execute(
                &request(),
                Some(&many),
                1 << 20,
                1 << 20,
                Duration::from_secs(1),
                true,
            )
            .await
        else {
            panic!("an unannounced mode was sent");
        };
        assert_eq!((mode, runner.runs), ("many_cases", 0));
        drop(runner);
        assert_eq!(sent_frames(theirs).await, Vec::<serde_json::Value>::new());
    }

    #[tokio::test]
    async fn an_image_of_another_protocol_is_named_with_the_fix() {
        let (mut runner, _theirs) = runner(&[serde_json::json!({"type": "ready", "protocol": 3})]);
        let Err(Failure::Protocol(message)) = runner.wait_ready(Duration::from_secs(5)).await
        else {
            panic!("a protocol-3 runner was accepted");
        };
        assert!(
            message.contains(&format!("protocol 3, not {PROTOCOL}"))
                && message.contains("sandbox-images/build"),
            "{message}"
        );
    }
}
