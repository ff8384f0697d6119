//! What finding a repair's lessons costs (BENCHMARKS.md): a tenant's set filled to `N` lessons
//! (default 500, `memory.max_lessons`' default) in the Redis of `CODEGEN__STORE__URL` (default
//! loopback; keys under a prefix of their own, removed after), each made by `learn::lesson`
//! from a generated repair of a 40-line function (its own identifiers, one of several failure
//! classes), then `Q` failures (default 400) looked up three ways in one run:
//!
//! - `Memory::nearest` as a repair calls it, the set unchanged since the last lookup: the two
//!   version reads and the ranking (exact signature, then BM25);
//! - the same right after a lesson was added, so that the set is read and indexed again;
//! - against them, one `GET` of the set's version alone (one Redis round trip), and the
//!   ranking in process with and without BM25 (exact signatures only).
//!
//! `cargo run --release -p memory --example retrieval -- [N] [Q]`. Prints p50/p99 of each
//! and their ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memory::learn::{self, Case, Repair};
use memory::ranking::Ranking;
use memory::{Memory, Options, Query};
use proto::lesson::LessonSource;
use proto::{ErrorKind, Language, TaskId};
use serde_json::{Map, Value, json};
use store::{LessonSet, Lessons};

const WORDS: &[&str] = &[
    "total", "count", "index", "value", "items", "window", "prefix", "suffix", "parse", "merge",
    "split", "token", "score", "limit", "range", "depth", "width", "price", "order", "group",
    "label", "digit", "vowel", "prime", "stack", "queue", "graph", "node", "edge", "path",
    "weight", "balance", "account", "matrix", "row", "column", "cell", "string", "number",
    "letter", "word", "sentence", "interval", "start", "end", "sorted", "unique", "pair",
];

/// A deterministic stream of small numbers (no dependency for randomness).
struct Stream(u64);

impl Stream {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below as u64) as usize
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.next(WORDS.len())]
    }
}

/// A failure of class `class`: its error, the failing case's output and the code before and
/// after its fix.
struct Failure {
    function: String,
    kind: ErrorKind,
    error: String,
    expected: Value,
    actual: Option<Value>,
    raised: Option<String>,
    before: String,
    after: String,
    analysis: String,
}

fn failure(stream: &mut Stream, n: usize) -> Failure {
    let function = format!("{}_{}_{n}", stream.word(), stream.word());
    let (a, b, c) = (stream.word(), stream.word(), stream.word());
    let mut body: Vec<String> = (0..36)
        .map(|i| {
            format!(
                "    {}_{i} = {}({}, {})",
                stream.word(),
                stream.word(),
                stream.word(),
                i
            )
        })
        .collect();
    let class = stream.next(4);
    let (kind, error, expected, actual, raised, old, new, analysis) = match class {
        0 => (
            ErrorKind::WrongOutput,
            String::new(),
            json!([1, 2, 3, 4]),
            Some(json!([1, 2, 3])),
            None,
            format!("    return [{a} for {a} in range(1, {b})]"),
            format!("    return [{a} for {a} in range(1, {b} + 1)]"),
            format!("The range stopped one short of {b}, so its last {a} was missing."),
        ),
        1 => (
            ErrorKind::Runtime,
            format!("IndexError: list index out of range (at {c}[0])"),
            json!(0),
            None,
            Some("IndexError: list index out of range".to_owned()),
            format!("    return {c}[0]"),
            format!("    return {c}[0] if {c} else 0"),
            format!("An empty {c} has no first element; it now answers 0."),
        ),
        2 => (
            ErrorKind::WrongOutput,
            format!("expected ValueError for negative {a}"),
            Value::Null,
            Some(json!(-1)),
            None,
            format!("    {b} = {a}"),
            format!("    if {a} < 0:\n        raise ValueError(\"negative {a}\")\n    {b} = {a}"),
            format!("A negative {a} must raise ValueError instead of passing through."),
        ),
        _ => (
            ErrorKind::Runtime,
            format!("TypeError: unsupported operand type(s) for +: 'int' and 'str' in {b}"),
            json!("12"),
            None,
            Some("TypeError: unsupported operand type(s) for +: 'int' and 'str'".to_owned()),
            format!("    return {a} + {b}"),
            format!("    return str({a}) + {b}"),
            format!("The {a} is a number and {b} a string; it is converted first."),
        ),
    };
    let at = stream.next(body.len());
    let mut after = body.clone();
    body.insert(at, old);
    after.insert(at, new);
    let head = format!("def {function}({a}, {b}):\n");
    Failure {
        before: head.clone() + &body.join("\n") + "\n",
        after: head + &after.join("\n") + "\n",
        function,
        kind,
        error,
        expected,
        actual,
        raised,
        analysis,
    }
}

fn lesson_of(f: &Failure, inputs: &Map<String, Value>) -> proto::lesson::Lesson {
    let case = Case {
        function: &f.function,
        inputs,
        expected_output: &f.expected,
        expected_error: None,
        actual_output: f.actual.as_ref(),
        error: f.raised.as_deref(),
    };
    learn::lesson(
        &Repair {
            language: Language::Python,
            error_kind: f.kind,
            error: &f.error,
            case: Some(case),
            before: &f.before,
            after: &f.after,
            analysis: &f.analysis,
            model: "bench",
            job: TaskId::new(),
            function: &f.function,
            source: LessonSource::Repair,
            given: false,
            now_ms: proto::now_ms(),
        },
        Options::default().max_diff_bytes,
    )
    .expect("a fix changes a line")
}

fn query_of(f: &Failure, inputs: &Map<String, Value>) -> (String, String) {
    let signature = memory::signature::signature(
        f.kind,
        &f.error,
        Some(memory::signature::FailedCase {
            expected_output: &f.expected,
            expected_error: None,
            actual_output: f.actual.as_ref(),
            error: f.raised.as_deref(),
        }),
    );
    let text = format!(
        "{}\n{inputs:?}\n{}",
        if f.error.is_empty() {
            "wrong output"
        } else {
            &f.error
        },
        f.before
    );
    (signature, text)
}

fn summary(name: &str, mut times: Vec<Duration>) -> f64 {
    times.sort();
    let at = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
    let p50 = at(50).as_secs_f64() * 1e3;
    println!(
        "{name:<44} p50 {:>8.3} ms   p99 {:>8.3} ms   ({} samples)",
        p50,
        at(99).as_secs_f64() * 1e3,
        times.len()
    );
    p50
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let q: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(400);
    let url =
        std::env::var("CODEGEN__STORE__URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let prefix = format!("bench-retrieval-{}", std::process::id());
    let redis_url = url.clone();
    let (redis, _listener) = store::RedisStore::build(store::Options {
        url,
        prefix: prefix.clone(),
        ..Default::default()
    })
    .expect("a valid store URL");
    let store: Arc<dyn Lessons> = Arc::new(redis);
    let options = Options {
        max_lessons: n as u64 + q as u64,
        max_bytes: 64 << 20,
        ..Options::default()
    };
    let memory = Memory::new(options.clone(), store.clone());
    let tenant = Some("bench");
    let mut stream = Stream(7);
    let inputs: Map<String, Value> = [("values".to_owned(), json!([3, 1, 2]))]
        .into_iter()
        .collect();

    let mut bytes = 0;
    for i in 0..n {
        let lesson = lesson_of(&failure(&mut stream, i), &inputs);
        bytes += serde_json::to_vec(&lesson).expect("serializable").len();
        memory
            .learn(tenant, &lesson)
            .await
            .expect("Redis reachable");
    }
    println!(
        "{n} lessons of python in the tenant's set, {} KiB as JSON; {q} lookups each",
        bytes / 1024
    );
    let queries: Vec<(String, String)> = (0..q)
        .map(|i| query_of(&failure(&mut stream, n + i), &inputs))
        .collect();

    let own = LessonSet::Tenant(tenant.map(str::to_owned));
    let mut round_trip = Vec::with_capacity(q);
    // The first q warm the connection.
    for i in 0..2 * q {
        let started = Instant::now();
        store.lessons_version(&own).await.expect("Redis reachable");
        if i >= q {
            round_trip.push(started.elapsed());
        }
    }
    // The first lookup reads and indexes the set; the rest find it unchanged.
    let (signature, text) = &queries[0];
    let query = |signature, text| Query {
        language: Language::Python,
        signature,
        text,
    };
    memory
        .nearest(tenant, &query(signature, text))
        .await
        .expect("Redis reachable");
    let mut warm = Vec::with_capacity(q);
    let mut shown = 0;
    for (signature, text) in &queries {
        let started = Instant::now();
        let found = memory
            .nearest(tenant, &query(signature, text))
            .await
            .expect("Redis reachable");
        warm.push(started.elapsed());
        shown += found.len();
    }
    let mut changed = Vec::with_capacity(q / 4);
    for (i, (signature, text)) in queries.iter().take(q / 4).enumerate() {
        let lesson = lesson_of(&failure(&mut stream, n + q + i), &inputs);
        memory
            .learn(tenant, &lesson)
            .await
            .expect("Redis reachable");
        let started = Instant::now();
        memory
            .nearest(tenant, &query(signature, text))
            .await
            .expect("Redis reachable");
        changed.push(started.elapsed());
    }
    let snapshot = store.lessons(&own).await.expect("Redis reachable");
    let stored = snapshot.lessons.clone();
    let mut indexing = Vec::with_capacity(q / 4);
    for _ in 0..q / 4 {
        let lessons = stored.iter().cloned().map(|l| (l, false)).collect();
        let started = Instant::now();
        std::hint::black_box(Ranking::new(lessons));
        indexing.push(started.elapsed());
    }
    let mut reading = Vec::with_capacity(q / 4);
    for _ in 0..q / 4 {
        let started = Instant::now();
        std::hint::black_box(store.lessons(&own).await.expect("Redis reachable"));
        reading.push(started.elapsed());
    }
    let ranking = Ranking::new(snapshot.lessons.into_iter().map(|l| (l, false)).collect());
    let mut ranked = Vec::with_capacity(q);
    let mut bm25 = Vec::with_capacity(q);
    let mut exact_only = Vec::with_capacity(q);
    for (signature, text) in &queries {
        let started = Instant::now();
        std::hint::black_box(ranking.nearest(&query(signature, text), options.k));
        ranked.push(started.elapsed());
        // A failure no lesson shares a signature with: BM25 over every lesson.
        let started = Instant::now();
        std::hint::black_box(ranking.nearest(&query("", text), options.k));
        bm25.push(started.elapsed());
        // Exact signatures alone: what the ranking costs without its lexical part.
        let started = Instant::now();
        let mut exact: Vec<&store::Stored> = stored
            .iter()
            .filter(|s| s.lesson.language == Language::Python && s.lesson.signature == *signature)
            .collect();
        exact.sort_by(|a, b| {
            memory::ranking::usefulness(b).total_cmp(&memory::ranking::usefulness(a))
        });
        exact.truncate(options.k);
        std::hint::black_box(exact);
        exact_only.push(started.elapsed());
    }
    println!("lessons shown per lookup: {:.2}", shown as f64 / q as f64);
    let trip = summary("one GET of the set's version (a round trip)", round_trip);
    let warm = summary("nearest, set unchanged", warm);
    let changed = summary("nearest, right after a lesson was added", changed);
    summary("  of which: reading the set", reading);
    summary("  of which: indexing it", indexing);
    summary("ranking in process, these failures", ranked);
    let bm25 = summary("ranking in process, no signature matches (BM25)", bm25);
    let exact = summary("ranking in process, exact signatures only", exact_only);
    println!(
        "nearest unchanged / round trip {:.2}x; after a change / round trip {:.1}x; BM25 / exact only {:.1}x",
        warm / trip,
        changed / trip,
        bm25 / exact.max(1e-6)
    );
    // Its keys go with it.
    let client = redis::Client::open(redis_url.as_str()).expect("a valid Redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis reachable");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut connection)
        .await
        .expect("Redis reachable");
    if !keys.is_empty() {
        let _: u64 = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut connection)
            .await
            .expect("Redis reachable");
    }
}
