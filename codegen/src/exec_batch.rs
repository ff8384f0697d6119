//! `codegen exec-batch`: a JSONL file of programs through `POST /v1/executions/batch`, in
//! streamed requests of `--chunk` programs, `--in-flight` at once.
//!
//! Nothing the user already has is lost: results are written to `OUT.partial` as they arrive
//! and `OUT` is replaced (in input order) only at the end, so an interrupted run leaves the
//! last complete `OUT` and the partial one beside it. A program the coordinator refused, or
//! whose request broke off, gets a line of its own with status `not_run` and why, and the
//! run goes on; `--resume` runs only the programs that have no other line in `OUT` or
//! `OUT.partial`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use futures::StreamExt;
use proto::api::ExecutionSubmission;

use crate::client::{Api, read_text, refusal};

#[derive(Debug, clap::Args)]
pub struct ExecBatchArgs {
    /// JSONL file, one program per line: `{"id", "language", "code", "test"?, "stdin"?,
    /// "timeout_ms"?, "memory_mb"?}` (`-` reads standard input). A program without an `id`
    /// gets its line number.
    pub input: PathBuf,
    /// Where the results go, one per line (`-` is stdout). Results are written to
    /// `OUTPUT.partial` as they arrive; OUTPUT is replaced, in input order, at the end.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Run only the programs whose id has no result yet in OUTPUT (or in the OUTPUT.partial
    /// of an interrupted run); a `not_run` line does not count as a result.
    #[arg(long)]
    pub resume: bool,
    /// Programs per request to `POST /v1/executions/batch`.
    #[arg(long, default_value_t = 64)]
    pub chunk: usize,
    /// Requests in flight at once (so at most chunk × in-flight programs are queued).
    #[arg(long, default_value_t = 4)]
    pub in_flight: usize,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// The status of a line this client writes for a program the coordinator did not run.
const NOT_RUN: &str = "not_run";

/// Refusals printed in full; the rest are counted.
const REFUSALS_SHOWN: usize = 5;

/// One program's result: its index in the input, and the line to write.
type Verdict = (usize, serde_json::Value);

/// `codegen exec-batch`: exits 0 when every program got a verdict of its own (passed or not),
/// 1 when some could not be run (`not_run`, `error`, `sandbox_error`), 2 on client errors.
pub async fn exec_batch(args: ExecBatchArgs) -> anyhow::Result<u8> {
    use std::io::IsTerminal;

    let started = std::time::Instant::now();
    let to_stdout = args.output.as_os_str() == "-";
    anyhow::ensure!(
        !(args.resume && to_stdout),
        "--resume needs an output file (it reads the results already there)"
    );
    let text = read_text(&args.input)?;
    let mut items = Vec::new();
    let mut line_numbers = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut item: ExecutionSubmission = serde_json::from_str(line)
            .with_context(|| format!("{}: line {}", args.input.display(), n + 1))?;
        // Without an id, a result still says which line it answers.
        item.id.get_or_insert_with(|| (n + 1).to_string());
        items.push(item);
        line_numbers.push(n + 1);
    }
    let total = items.len();
    anyhow::ensure!(total > 0, "{}: no programs", args.input.display());
    let partial = partial_path(&args.output);
    let previous = if args.resume {
        previous_results(&[&args.output, &partial])?
    } else {
        HashMap::new()
    };
    let api = Api::new(&args.url, args.api_key.as_deref())?;

    // What is already done keeps its line; the rest is run.
    let mut results: Vec<Option<String>> = items
        .iter()
        .map(|item| item.id.as_ref().and_then(|id| previous.get(id)).cloned())
        .collect();
    let todo: Vec<usize> = (0..total).filter(|i| results[*i].is_none()).collect();
    let kept = total - todo.len();
    if args.resume {
        eprintln!(
            "{kept} of {total} programs already have results in {}; running {}",
            args.output.display(),
            todo.len()
        );
    }
    let mut live = if to_stdout {
        None
    } else {
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(&partial)
                .with_context(|| format!("creating {}", partial.display()))?,
        );
        // A second interruption keeps what the first one had.
        for line in results.iter().flatten() {
            writeln!(file, "{line}").with_context(|| format!("writing {}", partial.display()))?;
        }
        Some(file)
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40.cyan/blue} {pos}/{len} programs  {per_sec}  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_position(kept as u64);
        bar
    });

    let chunk_size = args.chunk.max(1);
    let chunks: Vec<Vec<usize>> = todo.chunks(chunk_size).map(<[usize]>::to_vec).collect();
    let mut by_status: std::collections::BTreeMap<String, usize> = Default::default();
    let mut finished = kept;
    let mut refusals = 0usize;
    let mut last_print = std::time::Instant::now();
    // Requests stream their verdicts (`?stream=true`); every verdict is written as it arrives.
    let (verdicts, mut arrived) = tokio::sync::mpsc::channel::<Verdict>(1024);
    let (api, items, input, line_numbers) = (&api, &items, &args.input, &line_numbers);
    let requests = async move {
        futures::stream::iter(chunks)
            .for_each_concurrent(args.in_flight.max(1), |chunk| {
                let verdicts = verdicts.clone();
                async move {
                    run_chunk(api, items, chunk, &verdicts, input, line_numbers).await;
                }
            })
            .await;
    };
    let collect = async {
        while let Some((index, view)) = arrived.recv().await {
            let status = view["status"].as_str().unwrap_or("unknown").to_owned();
            if status == NOT_RUN {
                refusals += 1;
                if refusals <= REFUSALS_SHOWN {
                    let why = view["error"].as_str().unwrap_or_default();
                    match &bar {
                        Some(bar) => bar.println(why),
                        None => eprintln!("{why}"),
                    }
                }
            }
            *by_status.entry(status).or_default() += 1;
            let line = serde_json::to_string(&view)?;
            if let Some(out) = live.as_mut() {
                writeln!(out, "{line}").context("writing a result")?;
                if arrived.is_empty() {
                    out.flush().context("writing the results")?;
                }
            }
            if let Some(slot) = results.get_mut(index).filter(|s| s.is_none()) {
                *slot = Some(line);
                finished += 1;
            }
            let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
            match &bar {
                Some(bar) => {
                    bar.set_position(finished as u64);
                    bar.set_message(counts.join(", "));
                }
                None if last_print.elapsed().as_secs() >= 5 || finished == total => {
                    eprintln!(
                        "[{:>6.1}s] {finished}/{total} programs ({})",
                        started.elapsed().as_secs_f64(),
                        counts.join(", ")
                    );
                    last_print = std::time::Instant::now();
                }
                None => {}
            }
        }
        anyhow::Ok(())
    };
    // A failed write ends both: requests still streaming are dropped, not left blocked on a
    // channel nobody reads.
    tokio::select! {
        written = collect => written?,
        () = async {
            requests.await;
            std::future::pending::<()>().await
        } => {}
    }
    anyhow::ensure!(
        finished == total,
        "the coordinator answered {finished} of {total} programs"
    );
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(mut out) = live.take() {
        out.flush().context("writing the results")?;
    }
    if refusals > REFUSALS_SHOWN {
        eprintln!(
            "... and {} more programs not run",
            refusals - REFUSALS_SHOWN
        );
    }
    // Everything is in: the file again, in input order.
    let ordered: String = results
        .iter()
        .map(|l| l.clone().unwrap_or_default() + "\n")
        .collect();
    if to_stdout {
        std::io::stdout()
            .write_all(ordered.as_bytes())
            .context("writing the results")?;
    } else {
        std::fs::write(&partial, &ordered)
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, &args.output)
            .with_context(|| format!("writing {}", args.output.display()))?;
    }
    let wall = started.elapsed().as_secs_f64();
    let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let ran = total - kept;
    eprintln!(
        "{ran} programs in {wall:.2}s ({:.0}/s): {}{} -> {}",
        ran as f64 / wall.max(1e-9),
        counts.join(", "),
        if kept > 0 {
            format!("; {kept} kept from before")
        } else {
            String::new()
        },
        args.output.display()
    );
    let unrun = results.iter().flatten().any(|line| {
        serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| {
            matches!(
                v["status"].as_str(),
                Some(NOT_RUN | "error" | "sandbox_error") | None
            )
        })
    });
    Ok(if unrun { 1 } else { 0 })
}

/// `OUT.partial` beside `OUT`.
fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// The lines of `files` (those that exist) that are a result of a program, by its id: the
/// last one for an id wins, a `not_run` line is no result.
fn previous_results(files: &[&Path]) -> anyhow::Result<HashMap<String, String>> {
    let mut kept = HashMap::new();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
        };
        for line in text.lines() {
            // The last line of an interrupted write may be cut: it is no result.
            let Ok(view) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let (Some(id), Some(status)) = (view["id"].as_str(), view["status"].as_str())
                && status != NOT_RUN
            {
                kept.insert(id.to_owned(), line.to_owned());
            }
        }
    }
    Ok(kept)
}

/// The line of a program the coordinator did not run.
fn not_run(item: &ExecutionSubmission, why: String) -> serde_json::Value {
    serde_json::json!({ "id": item.id, "status": NOT_RUN, "error": why })
}

/// The programs `chunk` (indexes into `items`) through streamed
/// `POST /v1/executions/batch?stream=true` requests: sends each verdict as the coordinator
/// streams it; items it gives up on (`queued`) are polled one by one. An item the coordinator
/// refuses by name is answered `not_run` and the rest are sent again without it; a refusal
/// of the whole request, or a stream that breaks off, answers the items without a verdict
/// `not_run`. Messages name the input file, and a refused item its line (`line_numbers`).
async fn run_chunk(
    api: &Api,
    items: &[ExecutionSubmission],
    mut chunk: Vec<usize>,
    verdicts: &tokio::sync::mpsc::Sender<Verdict>,
    input: &Path,
    line_numbers: &[usize],
) {
    let name = |message: &str| format!("{}: {message}", input.display());
    let send = |verdict: Verdict| async move { verdicts.send(verdict).await.is_ok() };
    while !chunk.is_empty() {
        match send_chunk(api, items, &chunk, verdicts).await {
            Ok(()) => return,
            Err(Refused::Item(at, why)) => {
                let index = chunk.remove(at);
                let why = name(&on_line(&why, line_numbers[index]));
                if !send((index, not_run(&items[index], why))).await {
                    return;
                }
            }
            Err(Refused::Rest(answered, why)) => {
                let why = name(&why);
                for index in chunk.into_iter().filter(|i| !answered.contains(i)) {
                    if !send((index, not_run(&items[index], why.clone()))).await {
                        return;
                    }
                }
                return;
            }
        }
    }
}

/// Why a chunk's request did not answer every item.
enum Refused {
    /// Refused for the item at this place of the chunk, and why (`items[i]…`).
    Item(usize, String),
    /// The items not in this list (of input indexes) got no verdict, and why.
    Rest(Vec<usize>, String),
}

/// One streamed request for the items `chunk`.
async fn send_chunk(
    api: &Api,
    items: &[ExecutionSubmission],
    chunk: &[usize],
    verdicts: &tokio::sync::mpsc::Sender<Verdict>,
) -> Result<(), Refused> {
    let body = serde_json::json!({ "items": chunk.iter().map(|i| &items[*i]).collect::<Vec<_>>() });
    let mut response = api
        .send_creating(
            api.http
                .post(api.url("/v1/executions/batch?stream=true"))
                .json(&body),
            None,
        )
        .await
        .map_err(|e| Refused::Rest(Vec::new(), format!("{e:#}")))?;
    let status = response.status();
    if !status.is_success() {
        let bytes = response.bytes().await.unwrap_or_default();
        let why = format!("{:#}", refusal(status, &bytes));
        // A 4xx naming one item: that item, and the others again.
        if status.is_client_error()
            && let Some(at) = named_item(&why).filter(|at| *at < chunk.len())
        {
            return Err(Refused::Item(at, why));
        }
        return Err(Refused::Rest(Vec::new(), why));
    }
    let mut answered = Vec::new();
    let mut buffer: Vec<u8> = Vec::new();
    let mut queued = Vec::new();
    loop {
        let read = match response.chunk().await {
            Ok(read) => read,
            Err(e) => {
                return Err(Refused::Rest(
                    answered,
                    format!("the coordinator's streamed answer broke off: {e}"),
                ));
            }
        };
        let end = read.is_none();
        if let Some(bytes) = read {
            buffer.extend_from_slice(&bytes);
        }
        while let Some(newline) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=newline).collect();
            let Some((at, view)) = streamed(&line, chunk.len()) else {
                return Err(Refused::Rest(
                    answered,
                    "the coordinator streamed an unreadable line".into(),
                ));
            };
            let index = chunk[at];
            if answered.contains(&index) {
                continue;
            }
            answered.push(index);
            if view["status"] == "queued" {
                queued.push((index, view));
            } else if verdicts.send((index, view)).await.is_err() {
                return Ok(()); // the collector stopped (an error elsewhere)
            }
        }
        if end {
            break;
        }
    }
    if answered.len() < chunk.len() {
        let why = format!(
            "the coordinator's stream ended after {} of {} results",
            answered.len(),
            chunk.len()
        );
        return Err(Refused::Rest(answered, why));
    }
    for (index, mut view) in queued {
        while view["status"] == "queued" {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let id = view["execution_id"].as_str().unwrap_or_default().to_owned();
            let mut fresh = match api.get(&format!("/v1/executions/{id}")).await {
                Ok(fresh) => fresh,
                Err(e) => {
                    view = not_run(&items[index], format!("{e:#}"));
                    break;
                }
            };
            // The single-execution view carries the execution id as `id`: keep the label.
            fresh["execution_id"] = serde_json::Value::String(id);
            fresh["id"] = view["id"].clone();
            view = fresh;
        }
        if verdicts.send((index, view)).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// A streamed result line: its place in the request (`index`, removed) and the result.
fn streamed(line: &[u8], len: usize) -> Option<(usize, serde_json::Value)> {
    let mut view: serde_json::Value = serde_json::from_slice(line).ok()?;
    let at = view["index"]
        .as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < len)?;
    if let serde_json::Value::Object(fields) = &mut view {
        fields.remove("index");
    }
    Some((at, view))
}

/// The item a refusal names (`items[3].language: …`), by its place in the request.
fn named_item(message: &str) -> Option<usize> {
    let start = message.find("items[")? + "items[".len();
    let close = message[start..].find(']')?;
    message[start..start + close].parse().ok()
}

/// The coordinator names a bad item by its place in the request (`items[3].language: …`);
/// the user knows it by its line in the input file: `line 34: language: …`.
fn on_line(message: &str, line: usize) -> String {
    let Some(start) = message.find("items[") else {
        return message.to_owned();
    };
    let rest = &message[start + "items[".len()..];
    let Some(close) = rest.find(']') else {
        return message.to_owned();
    };
    format!(
        "{}line {line}{}",
        &message[..start],
        rest[close + 1..].replacen('.', ": ", 1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_item_is_named_by_its_line_in_the_input() {
        // The refused one is the second of its request, on the input's line 7.
        let message = "the coordinator answered 422: items[1].language: unknown language \"cobol\"";
        assert_eq!(named_item(message), Some(1));
        assert_eq!(
            on_line(message, 7),
            "the coordinator answered 422: line 7: language: unknown language \"cobol\""
        );
        assert_eq!(named_item("no item named"), None);
        assert_eq!(on_line("no item named", 7), "no item named");
        assert_eq!(on_line("items[0].code: x", 34), "line 34: code: x");
    }

    #[test]
    fn a_resume_keeps_results_and_not_what_was_not_run() {
        let dir = std::env::temp_dir().join(format!("exec-batch-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.jsonl");
        std::fs::write(
            &out,
            "{\"id\":\"a\",\"status\":\"passed\"}\n{\"id\":\"b\",\"status\":\"not_run\",\"error\":\"x\"}\n",
        )
        .unwrap();
        // The partial file of an interrupted run: a later result for b, and a cut line.
        std::fs::write(
            partial_path(&out),
            "{\"id\":\"b\",\"status\":\"failed\"}\n{\"id\":\"c\",\"sta",
        )
        .unwrap();
        let kept = previous_results(&[&out, &partial_path(&out), &dir.join("none")]).unwrap();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept["a"].contains("passed"));
        assert!(kept["b"].contains("failed"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
