//! Control over submitted work from the command line: `codegen cancel` and `codegen jobs`.

use proto::api::{BatchList, BatchView, ExecutionList, JobList};
use proto::job::JobResult;

use crate::client::{Api, read_json};

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The job id (from `codegen submit`), or with --batch the batch id.
    pub id: String,
    /// Cancel every unfinished job of the batch `id`.
    #[arg(long)]
    pub batch: bool,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// `codegen cancel`: exits 0 once cancelled, 2 on errors (an unknown id, a job that had
/// already ended: the coordinator's message says which).
pub async fn cancel(args: CancelArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let path = if args.batch {
        format!("/v1/batches/{}", args.id)
    } else {
        format!("/v1/jobs/{}", args.id)
    };
    let response = api.send(api.http.delete(api.url(&path))).await?;
    let (_, answer) = read_json(response).await?;
    if args.batch {
        let view: BatchView = serde_json::from_value(answer)?;
        let counts: Vec<String> = view
            .counts
            .iter()
            .map(|(status, n)| format!("{n} {}", serde_json::json!(status).as_str().unwrap_or("?")))
            .collect();
        println!("batch {}: {}", view.batch_id, counts.join(", "));
    } else {
        let result: JobResult = serde_json::from_value(answer)?;
        println!(
            "job {}: {} ({} of {} functions finished)",
            result.job_id,
            result.status,
            result.implementations.len(),
            result.function_specs.len()
        );
    }
    Ok(0)
}

/// `text` with control characters shown as `?`: an instruction is the tenant's text, and a
/// terminal must not take it for escape sequences.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum What {
    Jobs,
    Batches,
    Executions,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// What to list.
    #[arg(long, value_enum, default_value_t = What::Jobs)]
    pub what: What,
    /// Only items in this status (e.g. running, succeeded, cancelled; batches: running, done).
    #[arg(long)]
    pub status: Option<String>,
    /// Only items submitted at or after this time (RFC 3339, or milliseconds since the epoch).
    #[arg(long)]
    pub since: Option<String>,
    /// Only items submitted before this time.
    #[arg(long)]
    pub until: Option<String>,
    /// Items per page (1 to 100).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Start after this cursor (printed at the end of the page before).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow the pages to the end instead of printing one.
    #[arg(long)]
    pub all: bool,
    /// Print each page's JSON instead of one line per item.
    #[arg(long)]
    pub json: bool,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// `codegen jobs`: one line per item, newest first; the next page's cursor on stderr.
pub async fn list(args: ListArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let route = match args.what {
        What::Jobs => "/v1/jobs",
        What::Batches => "/v1/batches",
        What::Executions => "/v1/executions",
    };
    let mut cursor = args.cursor.clone();
    loop {
        let mut query = vec![("limit", args.limit.to_string())];
        for (name, value) in [
            ("status", &args.status),
            ("since", &args.since),
            ("until", &args.until),
            ("cursor", &cursor),
        ] {
            if let Some(value) = value {
                query.push((name, value.clone()));
            }
        }
        let response = api.send(api.http.get(api.url(route)).query(&query)).await?;
        let (_, page) = read_json(response).await?;
        if args.json {
            println!("{page}");
        }
        let next = match args.what {
            What::Jobs => {
                let list: JobList = serde_json::from_value(page)?;
                if !args.json {
                    for job in &list.jobs {
                        println!(
                            "{}  {:<11}  {}  {}",
                            job.job_id,
                            job.status.as_str(),
                            job.submitted_at_ms,
                            printable(job.instruction.lines().next().unwrap_or(""))
                        );
                    }
                }
                list.next_cursor
            }
            What::Batches => {
                let list: BatchList = serde_json::from_value(page)?;
                if !args.json {
                    for batch in &list.batches {
                        println!(
                            "{}  {:<7}  {}  {} jobs",
                            batch.batch_id,
                            serde_json::json!(batch.status).as_str().unwrap_or("?"),
                            batch.submitted_at_ms,
                            batch.jobs
                        );
                    }
                }
                list.next_cursor
            }
            What::Executions => {
                let list: ExecutionList = serde_json::from_value(page)?;
                if !args.json {
                    for execution in &list.executions {
                        println!(
                            "{}  {:<13}  {}  {}",
                            execution.id,
                            serde_json::json!(execution.status).as_str().unwrap_or("?"),
                            execution.submitted_at_ms,
                            execution.language
                        );
                    }
                }
                list.next_cursor
            }
        };
        match next {
            Some(next) if args.all => cursor = Some(next),
            Some(next) => {
                eprintln!("more: --cursor {next}");
                return Ok(0);
            }
            None => return Ok(0),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// Start of the window (RFC 3339; default: a day before --to).
    #[arg(long)]
    pub from: Option<String>,
    /// End of the window (RFC 3339; default: now).
    #[arg(long)]
    pub to: Option<String>,
    /// Another tenant (admin tenants only).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// `codegen usage`: the totals as JSON.
pub async fn usage(args: UsageArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let mut query = Vec::new();
    for (name, value) in [
        ("from", &args.from),
        ("to", &args.to),
        ("tenant", &args.tenant),
    ] {
        if let Some(value) = value {
            query.push((name, value.clone()));
        }
    }
    let response = api
        .send(api.http.get(api.url("/v1/usage")).query(&query))
        .await?;
    let (_, usage) = read_json(response).await?;
    let usage: proto::api::Usage = serde_json::from_value(usage)?;
    println!("{}", serde_json::to_string_pretty(&usage)?);
    Ok(0)
}
