//! A restore is exact or says what it is not (real RabbitMQ, Redis, Docker): a Python, a
//! JavaScript and a bash session each set up the edge cases of their kind (closures, lambdas,
//! attributes set after a definition, decorated and nested definitions, what cannot be kept:
//! an open file, a generator, a socket, a thread; a closure over a local, a function with a
//! method set on its prototype, an object of a class inside a value; functions, exported
//! variables, the umask and the working directory, pushd's stack), their worker is SIGKILLed
//! between two cells, and on the worker that restores them every edge case either reads back
//! as before the loss or is named in `unrestorable`, with its reason, and nothing else is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sessions::{WITHIN, call, cluster_with, open, run};

/// A session's edge cases: the cell that sets them up, the probe read after the restore and
/// the value it must give, and what must be named (name -> reason) and nothing else.
struct Edges {
    language: &'static str,
    setup: &'static str,
    probe: &'static str,
    /// The probe's `value` (Python, JavaScript) or `stdout` (bash).
    expected: &'static str,
    named: &'static [(&'static str, &'static str)],
}

const PYTHON: Edges = Edges {
    language: "python",
    setup: "import functools, socket, threading\n\
            def make(k):\n    def inner(v):\n        return v + k\n    return inner\n\
            closure = make(10)\n\
            table = {'sq': lambda v: v * v, 'k': 3}\n\
            class A:\n    pass\n\
            A.x = 1\n\
            def f():\n    return f.tag\n\
            f.tag = 'tagged'\n\
            def deco(fn):\n    def wrapper(*a):\n        return ('wrapped', fn(*a))\n    return wrapper\n\
            @deco\ndef dec(v):\n    return v\n\
            @functools.lru_cache\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\
            def factory(base):\n    class Local:\n        b = base\n    return Local\n\
            Local = factory(5)\n\
            obj = Local()\n\
            def counter():\n    n = 0\n    def step():\n        nonlocal n\n        n += 1\n        return n\n    return step\n\
            step = counter()\n\
            step(); step()\n\
            gen = (i for i in range(3))\n\
            handle = open('/work/kept.txt', 'w')\n\
            sock = socket.socket()\n\
            thread = threading.Thread(target=print)\n",
    probe: "(closure(1), table['sq'](table['k']), A.x, A().x, f(), dec(2), fib(20), obj.b, \
             isinstance(obj, Local), step(), \
             [n for n in ('gen', 'handle', 'sock', 'thread') if n in dir()])",
    expected: "(11, 9, 1, 1, 'tagged', ('wrapped', 2), 6765, 5, True, 3, [])",
    named: &[
        (
            "gen",
            "a generator cannot be checkpointed (its running frame cannot be saved)",
        ),
        (
            "handle",
            "an open file (io.TextIOWrapper) cannot be checkpointed",
        ),
        (
            "sock",
            "an open socket (socket.socket) cannot be checkpointed",
        ),
        (
            "thread",
            "a thread (threading.Thread) cannot be checkpointed",
        ),
    ],
};

const JAVASCRIPT: Edges = Edges {
    language: "javascript",
    setup: "function mk() { let y = 2; return () => y; }\n\
            var closed = mk();\n\
            var noCapture = (function () { return function () { return 7; }; })();\n\
            let top = 3;\n\
            function usesTop() { return top; }\n\
            function tagged() { return tagged.tag; }\n\
            tagged.tag = 'x';\n\
            class Counter { static n = 0; static bump() { return ++Counter.n; } }\n\
            Counter.n = 5;\n\
            function Old() {}\n\
            Old.prototype.greet = function () { return 1; };\n\
            class Box { constructor(v) { this.v = v; } get d() { return this.v * 2; } }\n\
            var boxes = [new Box(1)];\n\
            var lone = new Box(4);\n",
    probe: "JSON.stringify([noCapture(), usesTop(), tagged(), Counter.bump(), lone.d, \
             lone instanceof Box, typeof closed, typeof Old, typeof boxes])",
    expected: "'[7,3,\"x\",6,8,true,\"undefined\",\"undefined\",\"undefined\"]'",
    named: &[
        (
            "closed",
            "a function closing over a local scope (Closure (mk)) cannot be checkpointed: \
             its source alone does not hold what it closed over",
        ),
        (
            "Old",
            "its properties set after its definition (prototype.greet) are functions or \
             accessors, which are not kept beside its source",
        ),
        (
            "boxes",
            "it holds an object made by the class Box (at [0]), which would come back as a \
             plain object (the structured clone keeps no prototype)",
        ),
    ],
};

const BASH: Edges = Edges {
    language: "bash",
    setup: "greet() { echo \"hi $1\"; }\n\
            export -f greet\n\
            export LEVEL=3\n\
            declare -a list=(1 '2 3')\n\
            umask 027\n\
            mkdir -p /work/p/q && cd /work/p && pushd q >/dev/null\n\
            counter=0; bump() { counter=$((counter + 1)); }; bump; bump\n\
            sleep 600 &\n",
    probe: "bump; echo \"$counter $PWD $LEVEL ${list[1]} $(umask)\"; bash -c 'greet there'; \
             jobs | wc -l",
    expected: "3 /work/p/q 3 2 3 0027\nhi there\n0\n",
    named: &[
        (
            "%1",
            "a running background job (sleep 600 &) is not restored",
        ),
        (
            "<directory stack>",
            "pushd's directory stack (1 folders below the working directory) is not restored",
        ),
    ],
};

/// `unrestorable` as name -> reason.
fn named(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .unwrap_or_else(|| panic!("no unrestorable list: {list}"))
        .iter()
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_owned(),
                u["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn expected_named(edges: &Edges) -> BTreeMap<String, String> {
    edges
        .named
        .iter()
        .map(|(n, r)| ((*n).to_owned(), (*r).to_owned()))
        .collect()
}

#[tokio::test]
async fn every_edge_case_comes_back_after_a_sigkill_or_is_named() {
    let (cluster, _coordinator, mut first, _) = cluster_with(&[]).await;
    let base = cluster.url();
    let mut sessions = Vec::new();
    for edges in [&PYTHON, &JAVASCRIPT, &BASH] {
        let (status, session) =
            open(&cluster, &base, None, json!({"language": edges.language})).await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let (status, set) = run(&cluster, &base, None, &id, edges.setup).await;
        assert_eq!((status, &set["status"]), (200, &json!("ok")), "{set}");
        // The checkpoint says at once what it does not hold.
        assert_eq!(set["checkpoint"]["saved"], true, "{set}");
        assert_eq!(
            named(&set["checkpoint"]["unrestorable"]),
            expected_named(edges),
            "{}: {set}",
            edges.language
        );
        sessions.push((edges, id));
    }

    let (_second, _) = cluster.worker("second").await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(60));

    for (edges, id) in &sessions {
        // Waits out the moments when no worker can take the restore yet.
        let deadline = Instant::now() + WITHIN;
        let (status, after) = loop {
            let (status, answer) = run(&cluster, &base, None, id, edges.probe).await;
            if status == 503 && answer["code"] == "no_session_host" && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            break (status, answer);
        };
        assert_eq!((status, &after["status"]), (200, &json!("ok")), "{after}");
        let got = if edges.language == "bash" {
            &after["stdout"]
        } else {
            &after["value"]
        };
        assert_eq!(got, &json!(edges.expected), "{}: {after}", edges.language);
        let restored = &after["restored"];
        assert_eq!(restored["after_cell"], 1, "{after}");
        assert_eq!(
            named(&restored["unrestorable"]),
            expected_named(edges),
            "{}: {after}",
            edges.language
        );
    }

    for (_, id) in &sessions {
        call(
            &cluster,
            reqwest::Method::DELETE,
            format!("{base}/v1/sessions/{id}"),
            None,
            None,
        )
        .await;
        tests::wait_session_containers_gone(id).await;
    }
    cluster.cleanup().await;
}
