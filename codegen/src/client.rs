//! Client commands: talk to a coordinator over its HTTP API.

use std::path::PathBuf;

use anyhow::{Context, bail};
use proto::Status;
use proto::api::{ErrorBody, ExecutionSubmission, ExecutionView, Outcome};

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Program to run (`-` reads it from standard input).
    pub file: PathBuf,
    /// Language of the program.
    #[arg(long, default_value = "python")]
    pub language: String,
    /// File whose contents become the program's standard input.
    #[arg(long)]
    pub stdin: Option<PathBuf>,
    /// Wall-clock limit in milliseconds (coordinator default when omitted).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Memory limit in MiB (coordinator default when omitted).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Print the whole result as JSON instead of the program's output.
    #[arg(long)]
    pub json: bool,
}

/// Runs one program; exits 0 when it passed, 1 when it did not, 2 when the cluster failed us.
pub async fn exec(args: ExecArgs) -> anyhow::Result<u8> {
    let code = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the program from stdin")?
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?
    };
    let stdin = match &args.stdin {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    let submission = ExecutionSubmission {
        language: args.language.clone(),
        code,
        stdin,
        timeout_ms: args.timeout_ms,
        memory_mb: args.memory_mb,
    };
    let client = reqwest::Client::new();
    let base = args.url.trim_end_matches('/');
    let response = client
        .post(format!("{base}/v1/executions"))
        .json(&submission)
        .send()
        .await
        .with_context(|| format!("cannot reach the coordinator at {base}"))?;
    let mut view = read_view(response).await?;
    // The coordinator answers 202 when the verdict takes longer than its wait; keep polling.
    while matches!(view.outcome, Outcome::Pending { .. }) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let response = client
            .get(format!("{base}/v1/executions/{}", view.id))
            .send()
            .await
            .with_context(|| format!("cannot reach the coordinator at {base}"))?;
        view = read_view(response).await?;
    }
    let Outcome::Done(result) = &view.outcome else {
        unreachable!("loop exits on a verdict")
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", result.stdout);
        eprint!("{}", result.stderr);
        let mut summary = format!(
            "status={} exit_code={} duration_ms={}",
            result.status.as_str(),
            result
                .exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            result.duration_ms
        );
        if result.truncated {
            summary.push_str(" truncated=true");
        }
        if let Some(reason) = &result.reason {
            summary.push_str(&format!(" reason={reason:?}"));
        }
        eprintln!("{summary}");
    }
    Ok(match result.status {
        Status::Passed => 0,
        Status::SandboxError | Status::Error => 2,
        _ => 1,
    })
}

async fn read_view(response: reqwest::Response) -> anyhow::Result<ExecutionView> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .context("reading the coordinator's answer")?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).context("unreadable answer from the coordinator");
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => bail!("the coordinator answered {status}: {}", body.error),
        Err(_) => bail!(
            "the coordinator answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        ),
    }
}
