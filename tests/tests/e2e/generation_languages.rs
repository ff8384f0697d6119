//! Generation in languages other than Python, end to end: a scripted FAKE model set per
//! language (over the real OpenAI-compatible API) answers in the language, and the real cluster
//! plans, tests in the language's test form in its real sandbox image, repairs from the
//! verdicts, integrates and scores the module. Each set is the same job: a chain of three
//! functions (`prime_report` calls `sum_primes`, which calls `sieve`), where `sieve` is right
//! at once, `sum_primes` is wrong at first (it leaves out n itself) and `prime_report` does not
//! compile (or parse) at first; both are repaired from what their runs said.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};
use tests::Cluster;

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

/// One language's answers.
struct Set {
    language: &'static str,
    /// The plan's types: an integer, a list of integers, a text.
    int: &'static str,
    list: &'static str,
    /// What `sum_primes` returns.
    sum: &'static str,
    text: &'static str,
    /// What the error cases expect.
    error: &'static str,
    /// What `sieve` answers for 10 and for 1, as JSON (the primes, or in C their count).
    sieve_ten: &'static str,
    sieve_one: &'static str,
    sieve: &'static str,
    sum_wrong: &'static str,
    sum_fixed: &'static str,
    report_broken: &'static str,
    report_fixed: &'static str,
    /// What a module's declaration of `sieve` starts with.
    declares: &'static str,
}

const JAVASCRIPT: Set = Set {
    language: "javascript",
    int: "number",
    list: "number[]",
    sum: "number",
    text: "string",
    error: "RangeError",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "/**\n * The primes up to n.\n */\nfunction sieve(n) {\n  if (n < 0) throw new RangeError('n must be non-negative');\n  const primes = [];\n  for (let i = 2; i <= n; i++) {\n    if (primes.every((p) => i % p !== 0)) primes.push(i);\n  }\n  return primes;\n}\n",
    sum_wrong: "/** The sum of the primes up to n. */\nfunction sum_primes(n) {\n  return sieve(n - 1).reduce((a, b) => a + b, 0);\n}\n",
    sum_fixed: "/** The sum of the primes up to n. */\nfunction sum_primes(n) {\n  if (n < 0) throw new RangeError('n must be non-negative');\n  return sieve(n).reduce((a, b) => a + b, 0);\n}\n",
    report_broken: "/** How many primes there are up to n, and their sum. */\nfunction prime_report(n) {\n  return `count=${sieve(n).length} sum=${sum_primes(n)}`;\n",
    report_fixed: "/** How many primes there are up to n, and their sum. */\nfunction prime_report(n) {\n  return `count=${sieve(n).length} sum=${sum_primes(n)}`;\n}\n",
    declares: "function sieve(",
};

const TYPESCRIPT: Set = Set {
    language: "typescript",
    sieve: "/**\n * The primes up to n.\n */\nfunction sieve(n: number): number[] {\n  if (n < 0) throw new RangeError('n must be non-negative');\n  const primes: number[] = [];\n  for (let i = 2; i <= n; i++) {\n    if (primes.every((p) => i % p !== 0)) primes.push(i);\n  }\n  return primes;\n}\n",
    sum_wrong: "/** The sum of the primes up to n. */\nfunction sum_primes(n: number): number {\n  return sieve(n - 1).reduce((a, b) => a + b, 0);\n}\n",
    sum_fixed: "/** The sum of the primes up to n. */\nfunction sum_primes(n: number): number {\n  if (n < 0) throw new RangeError('n must be non-negative');\n  return sieve(n).reduce((a, b) => a + b, 0);\n}\n",
    report_broken: "/** How many primes there are up to n, and their sum. */\nfunction prime_report(n: number): string {\n  return `count=${sieve(n).length} sum=${sum_primes(n)}`;\n",
    report_fixed: "/** How many primes there are up to n, and their sum. */\nfunction prime_report(n: number): string {\n  return `count=${sieve(n).length} sum=${sum_primes(n)}`;\n}\n",
    ..JAVASCRIPT
};

const GO: Set = Set {
    language: "go",
    int: "int",
    list: "([]int, error)",
    sum: "(int, error)",
    text: "(string, error)",
    error: "error",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "import \"errors\"\n\n// sieve returns the primes up to n.\nfunc sieve(n int) ([]int, error) {\n\tif n < 0 {\n\t\treturn nil, errors.New(\"n must be non-negative\")\n\t}\n\tprimes := []int{}\n\tfor i := 2; i <= n; i++ {\n\t\tprime := true\n\t\tfor _, p := range primes {\n\t\t\tif i%p == 0 {\n\t\t\t\tprime = false\n\t\t\t\tbreak\n\t\t\t}\n\t\t}\n\t\tif prime {\n\t\t\tprimes = append(primes, i)\n\t\t}\n\t}\n\treturn primes, nil\n}\n",
    sum_wrong: "// sum_primes returns the sum of the primes up to n.\nfunc sum_primes(n int) (int, error) {\n\tprimes, err := sieve(n - 1)\n\tif err != nil {\n\t\treturn 0, err\n\t}\n\ttotal := 0\n\tfor _, p := range primes {\n\t\ttotal += p\n\t}\n\treturn total, nil\n}\n",
    sum_fixed: "// sum_primes returns the sum of the primes up to n.\nfunc sum_primes(n int) (int, error) {\n\tprimes, err := sieve(n)\n\tif err != nil {\n\t\treturn 0, err\n\t}\n\ttotal := 0\n\tfor _, p := range primes {\n\t\ttotal += p\n\t}\n\treturn total, nil\n}\n",
    report_broken: "import \"fmt\"\n\n// prime_report says how many primes there are up to n, and their sum.\nfunc prime_report(n int) (string, error) {\n\tprimes, err := sieve(n)\n\tif err != nil {\n\t\treturn \"\", err\n\t}\n\ttotal, err := sum_primes(n)\n\tif err != nil {\n\t\treturn \"\", err\n\t}\n\treturn fmt.Sprintf(\"count=%d sum=%d\", len(primes), totl), nil\n}\n",
    report_fixed: "import \"fmt\"\n\n// prime_report says how many primes there are up to n, and their sum.\nfunc prime_report(n int) (string, error) {\n\tprimes, err := sieve(n)\n\tif err != nil {\n\t\treturn \"\", err\n\t}\n\ttotal, err := sum_primes(n)\n\tif err != nil {\n\t\treturn \"\", err\n\t}\n\treturn fmt.Sprintf(\"count=%d sum=%d\", len(primes), total), nil\n}\n",
    declares: "func sieve(",
};

const BASH: Set = Set {
    language: "bash",
    int: "integer",
    list: "array",
    sum: "integer",
    text: "string",
    error: "error",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "# Prints the primes up to $1, one per line.\nsieve() {\n  local n=$1 i p prime primes=()\n  if (( n < 0 )); then echo 'n must be non-negative' >&2; return 1; fi\n  for (( i = 2; i <= n; i++ )); do\n    prime=1\n    for p in \"${primes[@]}\"; do (( i % p == 0 )) && { prime=0; break; }; done\n    (( prime )) && primes+=(\"$i\")\n  done\n  printf '%s\\n' \"${primes[@]}\"\n}\n",
    sum_wrong: "# Prints the sum of the primes up to $1.\nsum_primes() {\n  local total=0 p\n  for p in $(sieve \"$(( $1 - 1 ))\"); do total=$(( total + p )); done\n  echo \"$total\"\n}\n",
    sum_fixed: "# Prints the sum of the primes up to $1.\nsum_primes() {\n  local total=0 p primes\n  primes=$(sieve \"$1\") || return 1\n  for p in $primes; do total=$(( total + p )); done\n  echo \"$total\"\n}\n",
    report_broken: "# Prints how many primes there are up to $1, and their sum.\nprime_report() {\n  local count=0 p\n  for p in $(sieve \"$1\"); do count=$(( count + 1 ))\n  echo \"count=$count sum=$(sum_primes \"$1\")\"\n}\n",
    report_fixed: "# Prints how many primes there are up to $1, and their sum.\nprime_report() {\n  local count=0 p\n  for p in $(sieve \"$1\"); do count=$(( count + 1 )); done\n  echo \"count=$count sum=$(sum_primes \"$1\")\"\n}\n",
    declares: "sieve() {",
};

const JAVA: Set = Set {
    language: "java",
    int: "int",
    list: "List<Integer>",
    sum: "int",
    text: "String",
    error: "IllegalArgumentException",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "/** The primes up to n. */\npublic static List<Integer> sieve(int n) {\n    if (n < 0) throw new IllegalArgumentException(\"n must be non-negative\");\n    List<Integer> primes = new ArrayList<>();\n    for (int i = 2; i <= n; i++) {\n        boolean prime = true;\n        for (int p : primes) if (i % p == 0) { prime = false; break; }\n        if (prime) primes.add(i);\n    }\n    return primes;\n}\n",
    sum_wrong: "/** The sum of the primes up to n. */\npublic static int sum_primes(int n) {\n    int total = 0;\n    for (int p : sieve(n - 1)) total += p;\n    return total;\n}\n",
    sum_fixed: "/** The sum of the primes up to n. */\npublic static int sum_primes(int n) {\n    int total = 0;\n    for (int p : sieve(n)) total += p;\n    return total;\n}\n",
    report_broken: "/** How many primes there are up to n, and their sum. */\npublic static String prime_report(int n) {\n    return \"count=\" + sieve(n).size() + \" sum=\" + sum_primes(n)\n}\n",
    report_fixed: "/** How many primes there are up to n, and their sum. */\npublic static String prime_report(int n) {\n    return \"count=\" + sieve(n).size() + \" sum=\" + sum_primes(n);\n}\n",
    declares: "List<Integer> sieve(",
};

const RUST: Set = Set {
    language: "rust",
    int: "i64",
    list: "Result<Vec<i64>, String>",
    sum: "Result<i64, String>",
    text: "Result<String, String>",
    error: "Err",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "/// The primes up to n.\nfn sieve(n: i64) -> Result<Vec<i64>, String> {\n    if n < 0 {\n        return Err(\"n must be non-negative\".to_string());\n    }\n    let mut primes: Vec<i64> = Vec::new();\n    for i in 2..=n {\n        if primes.iter().all(|p| i % p != 0) {\n            primes.push(i);\n        }\n    }\n    Ok(primes)\n}\n",
    sum_wrong: "/// The sum of the primes up to n.\nfn sum_primes(n: i64) -> Result<i64, String> {\n    Ok(sieve(n - 1)?.iter().sum())\n}\n",
    sum_fixed: "/// The sum of the primes up to n.\nfn sum_primes(n: i64) -> Result<i64, String> {\n    Ok(sieve(n)?.iter().sum())\n}\n",
    report_broken: "/// How many primes there are up to n, and their sum.\nfn prime_report(n: i64) -> Result<String, String> {\n    let primes = sieve(n)?;\n    Ok(format!(\"count={} sum={}\", primes.length(), sum_primes(n)?))\n}\n",
    report_fixed: "/// How many primes there are up to n, and their sum.\nfn prime_report(n: i64) -> Result<String, String> {\n    let primes = sieve(n)?;\n    Ok(format!(\"count={} sum={}\", primes.len(), sum_primes(n)?))\n}\n",
    declares: "fn sieve(",
};

const CPP: Set = Set {
    language: "cpp",
    int: "int",
    list: "std::vector<int>",
    sum: "long long",
    text: "std::string",
    error: "std::invalid_argument",
    sieve_ten: "[2, 3, 5, 7]",
    sieve_one: "[]",
    sieve: "#include <stdexcept>\n#include <vector>\n\n// The primes up to n.\nstd::vector<int> sieve(int n) {\n    if (n < 0) throw std::invalid_argument(\"n must be non-negative\");\n    std::vector<int> primes;\n    for (int i = 2; i <= n; i++) {\n        bool prime = true;\n        for (int p : primes) if (i % p == 0) { prime = false; break; }\n        if (prime) primes.push_back(i);\n    }\n    return primes;\n}\n",
    sum_wrong: "// The sum of the primes up to n.\nlong long sum_primes(int n) {\n    long long total = 0;\n    for (int p : sieve(n - 1)) total += p;\n    return total;\n}\n",
    sum_fixed: "// The sum of the primes up to n.\nlong long sum_primes(int n) {\n    long long total = 0;\n    for (int p : sieve(n)) total += p;\n    return total;\n}\n",
    report_broken: "#include <string>\n\n// How many primes there are up to n, and their sum.\nstd::string prime_report(int n) {\n    return \"count=\" + std::to_string(sieve(n).length()) + \" sum=\" + std::to_string(sum_primes(n));\n}\n",
    report_fixed: "#include <string>\n\n// How many primes there are up to n, and their sum.\nstd::string prime_report(int n) {\n    return \"count=\" + std::to_string(sieve(n).size()) + \" sum=\" + std::to_string(sum_primes(n));\n}\n",
    declares: "std::vector<int> sieve(",
};

const C: Set = Set {
    language: "c",
    int: "int",
    list: "int",
    sum: "long long",
    text: "const char *",
    error: "abort",
    sieve_ten: "4",
    sieve_one: "0",
    sieve: "#include <assert.h>\n\n/* How many primes there are up to n. */\nint sieve(int n) {\n    assert(n >= 0);\n    int count = 0;\n    for (int i = 2; i <= n; i++) {\n        int prime = 1;\n        for (int d = 2; d * d <= i; d++) if (i % d == 0) { prime = 0; break; }\n        count += prime;\n    }\n    return count;\n}\n",
    sum_wrong: "/* The sum of the primes up to n. */\nlong long sum_primes(int n) {\n    long long total = 0;\n    for (int i = 2; i < n; i++) if (sieve(i) > sieve(i - 1)) total += i;\n    return total;\n}\n",
    sum_fixed: "#include <assert.h>\n\n/* The sum of the primes up to n. */\nlong long sum_primes(int n) {\n    assert(n >= 0);\n    long long total = 0;\n    for (int i = 2; i <= n; i++) if (sieve(i) > sieve(i - 1)) total += i;\n    return total;\n}\n",
    report_broken: "#include <stdio.h>\n\n/* How many primes there are up to n, and their sum. */\nconst char *prime_report(int n) {\n    static char out[64];\n    snprintf(out, sizeof out, \"count=%d sum=%lld\", sieve(n), sum_primes(n));\n    return output;\n}\n",
    report_fixed: "#include <stdio.h>\n\n/* How many primes there are up to n, and their sum. */\nconst char *prime_report(int n) {\n    static char out[64];\n    snprintf(out, sizeof out, \"count=%d sum=%lld\", sieve(n), sum_primes(n));\n    return out;\n}\n",
    declares: "int sieve(",
};

/// The result of job `body` on a cluster of its own (one coordinator, one worker) whose model
/// is the scripted FAKE of `script`.
async fn job_result(script: &std::path::Path, body: Value) -> Value {
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(script).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster.submit_job(body).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    cluster.wait_job(&id, JOB_DEADLINE).await
}

/// `set`'s script: answers picked by phase, function and the prompt's language.
fn script(dir: &std::path::Path, set: &Set) -> std::path::PathBuf {
    let language = set.language;
    let said = format!("senior {language} engineer");
    let function = |name: &str, purpose: &str, returns: &str, deps: &[&str]| {
        json!({"name": name, "purpose": purpose,
               "inputs": [{"name": "n", "type": set.int}],
               "outputs": {"type": returns, "description": "see the purpose"},
               "dependencies": deps, "complexity": "simple"})
    };
    let plan = json!({"functions": [
        function("sieve", "Return the sorted list of all primes <= n; empty for n < 2; fail for negative n.", set.list, &[]),
        function("sum_primes", "Return the sum of all primes <= n, using sieve; 0 for n < 2; fail for negative n.",
                 set.sum, &["sieve"]),
        function("prime_report", "Return \"count=C sum=S\" for the primes up to n, using sieve and sum_primes.",
                 set.text, &["sieve", "sum_primes"])]});
    let case = |name: &str, n: i64, expected: Value| {
        json!({"name": name, "kind": "normal", "inputs": {"n": n},
               "expected_output": expected, "expected_error": null})
    };
    let negative = json!({"name": "negative", "kind": "error", "inputs": {"n": -1},
                          "expected_output": null, "expected_error": set.error});
    let code = |code: &str| json!({"code": code, "analysis": null});
    let repaired = |code: &str, kind: &str, cause: &str| json!({"code": code, "analysis": {"error_kind": kind, "root_cause": cause, "changes": "fixed it"}});
    let answer = |phase: &str, function: &str, answer: Value| json!({"phase": phase, "function": function, "prompt_contains": &said, "answer": answer});
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": format!("Language: {language}"), "answer": plan},
        answer("tests", "sieve", json!({"cases": [
            case("ten", 10, serde_json::from_str(set.sieve_ten).unwrap()),
            case("one", 1, serde_json::from_str(set.sieve_one).unwrap()), negative.clone()]})),
        answer("tests", "sum_primes", json!({"cases": [
            case("ten", 10, json!(17)), case("seven", 7, json!(17)), case("zero", 0, json!(0)),
            negative]})),
        answer("tests", "prime_report", json!({"cases": [
            case("ten", 10, json!("count=4 sum=17")), case("one", 1, json!("count=0 sum=0"))]})),
        answer("implement", "sieve", code(set.sieve)),
        answer("implement", "sum_primes", code(set.sum_wrong)),
        answer("implement", "prime_report", code(set.report_broken)),
        answer("repair", "sum_primes", repaired(set.sum_fixed, "wrong_output", "sieve was called with n - 1")),
        answer("repair", "prime_report", repaired(set.report_fixed, "syntax", "it did not compile")),
    ]});
    let path = dir.join(format!("{language}-model.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

#[tokio::test]
async fn a_javascript_request_becomes_tested_javascript_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&JAVASCRIPT).await;
}

#[tokio::test]
async fn a_typescript_request_becomes_tested_typescript_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&TYPESCRIPT).await;
}

#[tokio::test]
async fn a_go_request_becomes_tested_go_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&GO).await;
}

#[tokio::test]
async fn a_bash_request_becomes_tested_bash_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&BASH).await;
}

#[tokio::test]
async fn a_java_request_becomes_tested_java_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&JAVA).await;
}

#[tokio::test]
async fn a_rust_request_becomes_tested_rust_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&RUST).await;
}

#[tokio::test]
async fn a_cpp_request_becomes_tested_cpp_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&CPP).await;
}

#[tokio::test]
async fn a_c_request_becomes_tested_c_with_repairs() {
    a_request_becomes_tested_code_with_repairs_in(&C).await;
}

async fn a_request_becomes_tested_code_with_repairs_in(set: &Set) {
    let language = set.language;
    let dir = tempfile::tempdir().unwrap();
    let result = job_result(
        &script(dir.path(), set),
        json!({
            "instruction": "Find all primes up to n, sum them, and report both.",
            "language": language,
            "max_iterations": 3
        }),
    )
    .await;

    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["language"], language, "{result:#}");
    assert_eq!(
        result["language_reason"], "named in the request's `language`",
        "{result:#}"
    );
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    assert_eq!(result["validation"], "tested", "{result:#}");
    // The first sum_primes left out n itself (7 for n = 7): a wrong output; the first
    // prime_report did not compile. Each was repaired once from what its run said.
    let history = result["improvement_history"].as_array().unwrap();
    let repairs: Vec<(&str, &str)> = history
        .iter()
        .map(|h| {
            (
                h["function"].as_str().unwrap(),
                h["error_kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(repairs.len(), 2, "{history:?}");
    assert!(
        repairs.contains(&("sum_primes", "wrong_output")),
        "{history:?}"
    );
    assert!(repairs.contains(&("prime_report", "syntax")), "{history:?}");
    let implementations = &result["implementations"];
    let code = |name: &str| implementations[name].as_str().unwrap().trim().to_owned();
    assert_eq!(code("sum_primes"), set.sum_fixed.trim(), "{result:#}");
    assert_eq!(code("prime_report"), set.report_fixed.trim(), "{result:#}");
    assert!(code("sieve").contains(set.declares), "{result:#}");
    // Every case again against the assembled module; the language's scan scores it.
    let quality = &result["quality"];
    assert_eq!(quality["tests_total"], 9, "{quality}");
    assert_eq!(quality["tests_passed"], 9, "{quality}");
    assert_eq!(quality["docstrings"], 1.0, "{quality}");
    // Each function found in the module, its complexity measured.
    let complexity = quality["complexity"].as_object().unwrap();
    assert_eq!(complexity.len(), 3, "{quality}");
    // A compiler's or linter's findings are measured where the image has one (none in these
    // modules: the generation_modes test shows one found).
    // JavaScript's and TypeScript's coverage comes from V8 (every line of these modules runs:
    // 1.0), Go's from `go tool cover` (statements: prime_report's `err != nil` return never
    // runs, its cases have no negative n); the others' is not measured.
    let unmeasured = match language {
        "javascript" | "typescript" => json!(["warnings"]),
        "go" => Value::Null,
        _ => json!(["coverage"]),
    };
    match language {
        "javascript" | "typescript" => assert_eq!(quality["coverage"], 1.0, "{quality}"),
        "go" => {
            let coverage = quality["coverage"].as_f64().unwrap();
            assert!((0.85..1.0).contains(&coverage), "{quality}");
        }
        // Not measured is not a zero.
        _ => assert_eq!(quality["coverage"], Value::Null, "{quality}"),
    }
    assert_eq!(
        quality.get("unmeasured").cloned().unwrap_or(Value::Null),
        unmeasured,
        "{quality}"
    );
    assert!(quality.get("warnings").is_none(), "{quality}");
    assert!(quality["score"].as_f64().unwrap() > 0.9, "{quality}");
}

/// Every set's languages.
const SETS: [&Set; 8] = [&JAVASCRIPT, &TYPESCRIPT, &GO, &BASH, &JAVA, &RUST, &CPP, &C];

/// Jobs in every language at once on one cluster of two workers, one of them killed in the
/// middle of a function: each job ends once, succeeded, each function finished once. The same
/// instruction in eight languages is eight solutions (the caches are keyed by language), and
/// again eight hits with the same code; another tenant sees none of them; a job cancelled in
/// flight ends cancelled.
#[tokio::test]
async fn jobs_in_every_language_keep_cache_tenancy_cancel_and_a_workers_death() {
    let dir = tempfile::tempdir().unwrap();
    // Every set's answers in one script (each picked by its language), slow enough that a
    // worker is caught mid-function.
    let mut answers = Vec::new();
    for set in SETS {
        let text = std::fs::read_to_string(script(dir.path(), set)).unwrap();
        let mut one: Value = serde_json::from_str(&text).unwrap();
        for answer in one["answers"].as_array_mut().unwrap() {
            answer["latency_ms"] = json!(300);
            answers.push(answer.take());
        }
    }
    let path = dir.path().join("every-language.json");
    std::fs::write(&path, json!({"answers": answers}).to_string()).unwrap();

    let mut cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let (_steady, _) = cluster.worker("steady").await;
    let (mut doomed, _) = cluster.worker("doomed").await;
    let jobs = format!("{}/v1/jobs", cluster.url());
    let submit = |language: &str, instruction: &str| {
        let body = json!({"instruction": instruction, "language": language, "max_iterations": 3});
        cluster.request_as(reqwest::Method::POST, &jobs, "key-acme", Some(body))
    };
    let instruction = "Find all primes up to n, sum them, and report both.";
    let mut ids = Vec::new();
    for set in SETS {
        let (status, _, body) = submit(set.language, instruction).await;
        assert_eq!(status, 202, "{}: {body}", set.language);
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    let (status, _, body) = submit("rust", "Primes up to n, their sum and a report.").await;
    assert_eq!(status, 202, "{body}");
    let cancelled = body["job_id"].as_str().unwrap().to_owned();
    let (status, _, body) = cluster
        .request_as(
            reqwest::Method::DELETE,
            &format!("{jobs}/{cancelled}"),
            "key-acme",
            None,
        )
        .await;
    assert!(status < 300, "{status}: {body}");

    // Kill one worker in the middle of implementing a function.
    let started = std::time::Instant::now();
    while !doomed.log_text().contains("implement task started") {
        assert!(started.elapsed() < JOB_DEADLINE, "{}", doomed.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    doomed.signal("KILL");
    doomed.wait_exit(Duration::from_secs(60));

    let mut implementations = Vec::new();
    for (set, id) in SETS.iter().zip(&ids) {
        let result = cluster.wait_ended_as(id, "key-acme").await;
        assert_eq!(
            result["status"], "succeeded",
            "{}: {result:#}",
            set.language
        );
        assert_eq!(result["language"], set.language, "{result:#}");
        assert_eq!(result["metrics"]["cache"], "miss", "{result:#}");
        assert_eq!(result["quality"]["tests_passed"], 9, "{result:#}");
        // Two repairs, none recorded twice.
        let history = result["improvement_history"].as_array().unwrap();
        assert_eq!(history.len(), 2, "{}: {history:?}", set.language);
        let events = cluster
            .http
            .get(format!("{jobs}/{id}/events"))
            .bearer_auth("key-acme")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(
            events.matches("event: function_done").count(),
            3,
            "{}: {events}",
            set.language
        );
        assert!(
            result["implementations"]["sieve"]
                .as_str()
                .unwrap()
                .contains(set.declares),
            "{result:#}"
        );
        implementations.push(result["implementations"].clone());
    }
    let ended = cluster.wait_ended_as(&cancelled, "key-acme").await;
    assert_eq!(ended["status"], "cancelled", "{ended:#}");

    // Another tenant sees none of them.
    for id in ids.iter().chain([&cancelled]) {
        let (status, _, body) = cluster
            .request_as(
                reqwest::Method::GET,
                &format!("{jobs}/{id}"),
                "key-globex",
                None,
            )
            .await;
        assert_eq!(status, 404, "{body}");
    }
    let (status, _, listed) = cluster
        .request_as(reqwest::Method::GET, &jobs, "key-globex", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["jobs"], json!([]), "{listed}");

    // The same requests again: each language's own solution, at once.
    for (set, first) in SETS.iter().zip(&implementations) {
        let (status, _, hit) = submit(set.language, instruction).await;
        assert_eq!(status, 200, "{}: {hit}", set.language);
        assert_eq!(hit["metrics"]["cache"], "hit", "{hit}");
        assert_eq!(hit["language"], set.language, "{hit}");
        assert_eq!(&hit["implementations"], first, "{}", set.language);
    }
    cluster.cleanup().await;
}

/// A python-sci job: its code imports numpy and returns numpy's own arrays and scalars, its
/// cases run in the python-sci image's harness (in the Python image the import would fail)
/// and compare as the lists and numbers those hold.
#[tokio::test]
async fn a_python_sci_request_is_tested_with_numpy_in_its_image() {
    let dir = tempfile::tempdir().unwrap();
    let said = "senior python-sci engineer";
    let function = |name: &str, purpose: &str, returns: &str| {
        json!({"name": name, "purpose": purpose,
               "inputs": [{"name": "xs", "type": "list[float]"}],
               "outputs": {"type": returns, "description": "see the purpose"},
               "dependencies": [], "complexity": "simple"})
    };
    let case = |name: &str, xs: Value, expected: Value| {
        json!({"name": name, "kind": "normal", "inputs": {"xs": xs},
               "expected_output": expected, "expected_error": null})
    };
    let answer = |phase: &str, function: &str, answer: Value| json!({"phase": phase, "function": function, "prompt_contains": said, "answer": answer});
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "Language: python-sci", "answer": {"functions": [
            function("normalize", "Scale xs to unit Euclidean length; ValueError for a zero vector.", "numpy.ndarray"),
            function("dominant", "The index of the largest element of xs.", "int")]}},
        answer("tests", "normalize", json!({"cases": [
            case("three four", json!([3.0, 4.0]), json!([0.6, 0.8])),
            {"name": "zero", "kind": "error", "inputs": {"xs": [0.0, 0.0]},
             "expected_output": null, "expected_error": "ValueError"}]})),
        answer("tests", "dominant", json!({"cases": [
            case("middle", json!([1.0, 5.0, 2.0]), json!(1)),
            case("first", json!([9.0, 5.0]), json!(0))]})),
        answer("implement", "normalize", json!({"analysis": null, "code":
            "import numpy as np\n\n\ndef normalize(xs):\n    \"\"\"Scale xs to unit length.\"\"\"\n    v = np.asarray(xs, dtype=float)\n    norm = np.linalg.norm(v)\n    if norm == 0:\n        raise ValueError(\"zero vector\")\n    return v / norm\n"})),
        answer("implement", "dominant", json!({"analysis": null, "code":
            "import numpy as np\n\n\ndef dominant(xs):\n    \"\"\"The index of the largest element.\"\"\"\n    return np.argmax(np.asarray(xs))\n"})),
    ]});
    let path = dir.path().join("python-sci-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let result = job_result(
        &path,
        json!({
            "instruction": "Normalize a vector and find its dominant component with numpy.",
            "max_iterations": 2
        }),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["language"], "python-sci", "{result:#}");
    assert!(
        result["language_reason"]
            .as_str()
            .unwrap()
            .contains("numpy"),
        "{result:#}"
    );
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    assert_eq!(result["improvement_history"], json!([]), "{result:#}");
    let quality = &result["quality"];
    assert_eq!(quality["tests_passed"], 4, "{quality}");
    // The Python harness measures coverage here too (nothing is unmeasured, so the field is
    // left out).
    assert!(quality.get("unmeasured").is_none(), "{quality}");
    assert!(quality["coverage"].as_f64().unwrap() > 0.5, "{quality}");
}

/// A `debug` job in `set`'s language: the given code is `sieve` and the wrong `sum_primes`,
/// the error what it returned for 7; the model's case for 7 fails on the given code (it
/// reproduces the error), the fixed module passes it.
async fn a_debug_job_fixes_sum_primes_in(set: &Set) {
    let language = set.language;
    let said = format!("senior {language} engineer");
    let given = format!("{}\n\n{}", set.sieve, set.sum_wrong);
    let fixed = format!("{}\n\n{}", set.sieve, set.sum_fixed);
    let case = |name: &str, n: i64, expected: i64| {
        json!({"name": name, "kind": "normal", "inputs": {"n": n},
               "expected_output": expected, "expected_error": null})
    };
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "through which the reported error shows", "answer": {"functions": [
            {"name": "sum_primes", "purpose": "Return the sum of all primes <= n; 0 for n < 2.",
             "inputs": [{"name": "n", "type": set.int}],
             "outputs": {"type": set.sum, "description": "the sum"},
             "dependencies": [], "complexity": "simple"}]}},
        {"phase": "tests", "function": "sum_primes", "prompt_contains": &said,
         "answer": {"cases": [case("seven", 7, 17), case("one", 1, 0)]}},
        {"phase": "implement", "function": "sum_primes", "prompt_contains": "Fix the cause of a reported error",
         "answer": {"code": fixed, "analysis": {"error_kind": "wrong_output",
            "root_cause": "sieve is called with n - 1, which leaves n out",
            "changes": "call sieve with n"}}}
    ]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{language}-debug-model.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    let result = job_result(
        &path,
        json!({
            "instruction": "Sum the primes up to n.",
            "language": language,
            "mode": "debug",
            "code": given,
            "error": "sum_primes(7) returned 10, expected 17",
        }),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let change = &result["change"];
    assert_eq!(change["reproducing_tests"], json!(["seven"]), "{result:#}");
    assert_eq!(
        result["implementations"]["sum_primes"]
            .as_str()
            .unwrap()
            .trim(),
        fixed.trim(),
        "{result:#}"
    );
    let diff = change["diff"].as_str().unwrap();
    assert!(diff.starts_with("--- given\n+++ changed\n"), "{diff}");
    assert_eq!(result["quality"]["tests_passed"], 2, "{result:#}");
}

#[tokio::test]
async fn a_javascript_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&JAVASCRIPT).await;
}

#[tokio::test]
async fn a_typescript_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&TYPESCRIPT).await;
}

#[tokio::test]
async fn a_go_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&GO).await;
}

#[tokio::test]
async fn a_rust_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&RUST).await;
}

#[tokio::test]
async fn a_java_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&JAVA).await;
}

#[tokio::test]
async fn a_c_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&C).await;
}

#[tokio::test]
async fn a_cpp_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&CPP).await;
}

#[tokio::test]
async fn a_bash_debug_job_reproduces_then_fixes() {
    a_debug_job_fixes_sum_primes_in(&BASH).await;
}

/// A `refactor` job in `set`'s language: the given code is `sieve` and the right `sum_primes`;
/// of the model's characterisation cases the one the given code fails is left out, the
/// refactored module (the same code, documented once more) passes the rest, and the result
/// holds the given code's quality beside the new.
async fn a_refactor_job_keeps_sum_primes_in(set: &Set) {
    let language = set.language;
    let said = format!("senior {language} engineer");
    let given = format!("{}\n\n{}", set.sieve, set.sum_fixed);
    let note = match language {
        "bash" => "# sum_primes adds up what sieve finds.\n",
        "c" => "/* sum_primes adds up what sieve finds. */\n",
        _ => "// sum_primes adds up what sieve finds.\n",
    };
    let refactored = format!("{given}\n{note}");
    let case = |name: &str, n: i64, expected: i64| {
        json!({"name": name, "kind": "normal", "inputs": {"n": n},
               "expected_output": expected, "expected_error": null})
    };
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "Refactoring goals: readability", "answer": {"functions": [
            {"name": "sum_primes", "purpose": "Return the sum of all primes <= n; 0 for n < 2.",
             "inputs": [{"name": "n", "type": set.int}],
             "outputs": {"type": set.sum, "description": "the sum"},
             "dependencies": [], "complexity": "simple"}]}},
        {"phase": "tests", "function": "sum_primes", "prompt_contains": &said,
         "answer": {"cases": [case("seven", 7, 17), case("one", 1, 0), case("not what it does", 2, 5)]}},
        {"phase": "implement", "function": "sum_primes", "prompt_contains": "Refactor code toward its goals",
         "answer": {"code": refactored, "analysis": {"error_kind": "none",
            "root_cause": "how sum_primes uses sieve was unsaid",
            "changes": "readability: a comment on sum_primes"}}}
    ]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{language}-refactor-model.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    let result = job_result(
        &path,
        json!({
            "instruction": "Sum the primes up to n.",
            "language": language,
            "mode": "refactor",
            "code": given,
        }),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let change = &result["change"];
    assert_eq!(change["goals"], json!(["readability"]), "{result:#}");
    assert_eq!(
        change["dropped_tests"],
        json!(["not what it does"]),
        "{result:#}"
    );
    assert_eq!(result["quality"]["tests_passed"], 2, "{result:#}");
    assert!(change["quality_before"]["score"].is_number(), "{result:#}");
    assert!(
        change["diff"]
            .as_str()
            .unwrap()
            .contains("sum_primes adds up what sieve finds"),
        "{result:#}"
    );
}

#[tokio::test]
async fn a_typescript_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&TYPESCRIPT).await;
}

#[tokio::test]
async fn a_go_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&GO).await;
}

#[tokio::test]
async fn a_rust_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&RUST).await;
}

#[tokio::test]
async fn a_java_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&JAVA).await;
}

#[tokio::test]
async fn a_c_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&C).await;
}

#[tokio::test]
async fn a_cpp_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&CPP).await;
}

#[tokio::test]
async fn a_bash_refactor_job_keeps_behaviour() {
    a_refactor_job_keeps_sum_primes_in(&BASH).await;
}
