//! `codegen lessons`: the memory of repairs from the command line (`/v1/lessons`): list or
//! search a set, show one lesson with where it was used, delete one, export a set as JSON
//! Lines and import such a file.

use proto::lesson::{LessonImport, LessonList, LessonView};

use crate::client::{Api, read_json, refusal};

#[derive(Debug, clap::Args)]
pub struct LessonsArgs {
    #[command(subcommand)]
    pub command: LessonsCommand,
    /// Another tenant's lessons (for `coordinator.admin_tenants`).
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    /// The operators' shared set instead of your own.
    #[arg(long, global = true)]
    pub shared: bool,
    /// Coordinator URL.
    #[arg(
        long,
        env = "CODEGEN_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum LessonsCommand {
    /// The set's lessons, newest first (with a query, nearest first): id, language, how often
    /// shown and helped, signature.
    List {
        /// Words to search for (signature, failing case, analysis, diff).
        query: Option<String>,
        #[arg(long)]
        language: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One lesson as JSON, with its latest uses.
    Show { id: String },
    /// Delete a lesson: later repairs are no longer shown it.
    Delete { id: String },
    /// The set as JSON Lines on standard output.
    Export,
    /// Add the lessons of a JSON Lines file (as `export` writes them).
    Import { file: std::path::PathBuf },
}

/// Exits 0 on success, 2 when the coordinator refused (its message printed).
pub async fn lessons(args: LessonsArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let mut set: Vec<(&str, String)> = Vec::new();
    if let Some(tenant) = &args.tenant {
        set.push(("tenant", tenant.clone()));
    }
    if args.shared {
        set.push(("shared", "true".into()));
    }
    match args.command {
        LessonsCommand::List {
            query,
            language,
            limit,
        } => {
            let mut params = set.clone();
            params.push(("limit", limit.to_string()));
            if let Some(q) = query {
                params.push(("q", q));
            }
            if let Some(language) = language {
                params.push(("language", language));
            }
            let response = api
                .send(api.http.get(api.url("/v1/lessons")).query(&params))
                .await?;
            let (_, answer) = read_json(response).await?;
            let list: LessonList = serde_json::from_value(answer)?;
            for view in &list.lessons {
                println!(
                    "{}  {:<10} shown {:>3}, helped {:>3}  {}",
                    view.lesson.id,
                    view.lesson.language,
                    view.retrieved,
                    view.helped,
                    printable(&view.lesson.signature)
                );
            }
            if list.lessons.is_empty() {
                println!("no lessons");
            }
        }
        LessonsCommand::Show { id } => {
            let response = api
                .send(
                    api.http
                        .get(api.url(&format!("/v1/lessons/{id}")))
                        .query(&set),
                )
                .await?;
            let (_, answer) = read_json(response).await?;
            let view: LessonView = serde_json::from_value(answer)?;
            println!("{}", serde_json::to_string_pretty(&view)?);
        }
        LessonsCommand::Delete { id } => {
            let response = api
                .send(
                    api.http
                        .delete(api.url(&format!("/v1/lessons/{id}")))
                        .query(&set),
                )
                .await?;
            let status = response.status();
            if !status.is_success() {
                return Err(refusal(status, &response.bytes().await?));
            }
            println!("deleted {id}");
        }
        LessonsCommand::Export => {
            let response = api
                .send(api.http.get(api.url("/v1/lessons/export")).query(&set))
                .await?;
            let status = response.status();
            if !status.is_success() {
                return Err(refusal(status, &response.bytes().await?));
            }
            print!("{}", response.text().await?);
        }
        LessonsCommand::Import { file } => {
            let body = std::fs::read(&file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            let response = api
                .send(
                    api.http
                        .post(api.url("/v1/lessons/import"))
                        .query(&set)
                        .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                        .body(body),
                )
                .await?;
            let (_, answer) = read_json(response).await?;
            let report: LessonImport = serde_json::from_value(answer)?;
            println!(
                "{} added, {} there already, {} too large, {} evicted",
                report.added, report.already, report.too_large, report.evicted
            );
        }
    }
    Ok(0)
}

/// `text` with control characters shown as `?` (a lesson holds a model's words).
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
