//! A session outlives its worker (real RabbitMQ, Redis, Docker): every cell's checkpoint kept
//! in Redis, a SIGKILLed worker's sessions restored on another worker at their next call with
//! their names, definitions, imports, working directory and files, what could not come back
//! named; a cell the loss interrupted run once on the restored session (never twice); nothing
//! left behind (containers, checkpoint keys) once they are deleted.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::sessions::{WITHIN, call, cluster_with, open, run};

/// Sessions the killed worker holds.
const SESSIONS: usize = 20;

/// Runs `code` in session `id`, waiting out the moments when no worker can take the restore
/// yet (the second worker's first announcement).
async fn run_restoring(cluster: &tests::Cluster, base: &str, id: &str, code: &str) -> (u16, Value) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, answer) = run(cluster, base, None, id, code).await;
        if status == 503 && answer["code"] == "no_session_host" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        return (status, answer);
    }
}

/// The cell that gives session `i` its state: a value, a function, a class and an instance,
/// a module, a file below a folder it then works in, and an open file (not restorable).
fn setup(i: usize) -> String {
    format!(
        "import json, os\n\
         x = {i}\n\
         def twice(v):\n    return 2 * v\n\
         class Point:\n    def __init__(self, v):\n        self.v = v\n\
         p = Point(x)\n\
         shared = [x]\n\
         alias = shared\n\
         os.makedirs('d', exist_ok=True)\n\
         with open('d/data.bin', 'wb') as f:\n    f.write(bytes(range(256)) * {n})\n\
         os.chdir('d')\n\
         handle = open('data.bin', 'rb')\n\
         x\n",
        n = i + 1
    )
}

/// Waits until `n` workers have announced themselves as session hosts.
async fn wait_hosts(cluster: &tests::Cluster, n: usize) {
    let client = redis::Client::open(cluster.redis_url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + WITHIN;
    loop {
        let hosts: usize = connection
            .zcard(format!("{}:sessions:hosts", cluster.prefix))
            .await
            .unwrap();
        if hosts >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{hosts} session hosts, not {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn checkpoint_keys(cluster: &tests::Cluster) -> Vec<String> {
    let client = redis::Client::open(cluster.redis_url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    connection
        .keys(format!("{}:session:*:checkpoint", cluster.prefix))
        .await
        .unwrap()
}

#[tokio::test]
async fn twenty_sessions_outlive_their_sigkilled_worker_and_leave_nothing_behind() {
    let (cluster, _coordinator, mut first, _) = cluster_with(&[]).await;
    let base = cluster.url();
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let (status, session) = open(&cluster, &base, None, json!({"language": "python"})).await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let (status, set) = run(&cluster, &base, None, &id, &setup(i)).await;
        assert_eq!((status, &set["status"]), (200, &json!("ok")), "{set}");
        assert_eq!(set["value"], i.to_string(), "{set}");
        // Kept, and it says what it does not hold.
        assert_eq!(set["checkpoint"]["saved"], true, "{set}");
        let unrestorable = set["checkpoint"]["unrestorable"].as_array().unwrap();
        assert!(unrestorable.iter().any(|u| u["name"] == "handle"), "{set}");
        ids.push(id);
    }
    // A bash and a JavaScript session beside them.
    let (_, bash) = open(&cluster, &base, None, json!({"language": "bash"})).await;
    let bash = bash["id"].as_str().unwrap().to_owned();
    let (_, set) = run(
        &cluster,
        &base,
        None,
        &bash,
        "export GREETING=hello; count=41; bump() { echo $((count + 1)); }; mkdir -p w && cd w && printf 'kept' > note.txt",
    )
    .await;
    assert_eq!(set["checkpoint"]["saved"], true, "{set}");
    let (_, js) = open(&cluster, &base, None, json!({"language": "javascript"})).await;
    let js = js["id"].as_str().unwrap().to_owned();
    let (_, set) = run(
        &cluster,
        &base,
        None,
        &js,
        "const limit = 7; let seen = [1, 2]; function add(a, b) { return a + b; }; var total = add(limit, 1);",
    )
    .await;
    assert_eq!(set["checkpoint"]["saved"], true, "{set}");

    let (_second, second_ops) = cluster.worker("second").await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(60));

    for (i, id) in ids.iter().enumerate() {
        let (status, after) = run_restoring(
            &cluster,
            &base,
            id,
            "(x, twice(x), p.v, alias is shared, os.getcwd(), open('data.bin', 'rb').read() == bytes(range(256)) * (x + 1), json.dumps([x]))",
        )
        .await;
        assert_eq!((status, &after["status"]), (200, &json!("ok")), "{after}");
        assert_eq!(
            after["value"],
            format!("({i}, {}, {i}, True, '/work/d', True, '[{i}]')", 2 * i),
            "{after}"
        );
        let restored = &after["restored"];
        assert_eq!(restored["after_cell"], 1, "{after}");
        assert!(
            restored["unrestorable"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["name"] == "handle" && !u["reason"].as_str().unwrap().is_empty()),
            "{after}"
        );
        // Its files come back byte for byte, and it ran each cell once.
        let bytes = cluster
            .http
            .get(format!("{base}/v1/sessions/{id}/files/d/data.bin"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            bytes.to_vec(),
            (0..=255u8).collect::<Vec<_>>().repeat(i + 1)
        );
        let (_, view) = call(
            &cluster,
            reqwest::Method::GET,
            format!("{base}/v1/sessions/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!(
            (&view["state"], &view["cells"], &view["restores"]),
            (&json!("live"), &json!(2), &json!(1)),
            "{view}"
        );
        // The next call needs no restore.
        let (_, again) = run(&cluster, &base, None, id, "x + 1").await;
        assert_eq!(again["value"], (i + 1).to_string(), "{again}");
        assert!(again.get("restored").is_none(), "{again}");
    }
    let (_, after) = run_restoring(
        &cluster,
        &base,
        &bash,
        "echo \"$GREETING $(bump) $(pwd) $(cat note.txt)\"",
    )
    .await;
    assert_eq!(
        (&after["status"], &after["stdout"]),
        (&json!("ok"), &json!("hello 42 /work/w kept\n")),
        "{after}"
    );
    let (_, after) =
        run_restoring(&cluster, &base, &js, "[limit, seen.length, add(total, 0)]").await;
    assert_eq!(
        (&after["status"], &after["value"]),
        (&json!("ok"), &json!("[ 7, 2, 8 ]")),
        "{after}"
    );
    assert_eq!(
        tests::metric(
            &cluster.http,
            &second_ops,
            "codegen_session_restores_total{result=\"restored\"}"
        )
        .await,
        (SESSIONS + 2) as f64
    );

    // One container each (the dead worker's went with it), none and no checkpoint after
    // they are deleted.
    ids.extend([bash, js]);
    for id in &ids {
        let deadline = Instant::now() + WITHIN;
        while tests::session_containers(id).len() != 1 {
            assert!(Instant::now() < deadline, "session {id}'s containers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(checkpoint_keys(&cluster).await.len(), ids.len());
    for id in &ids {
        let (status, view) = call(
            &cluster,
            reqwest::Method::DELETE,
            format!("{base}/v1/sessions/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!((status, &view["state"]), (200, &json!("ended")), "{view}");
    }
    for id in &ids {
        tests::wait_session_containers_gone(id).await;
    }
    assert_eq!(checkpoint_keys(&cluster).await, Vec::<String>::new());
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_cell_the_loss_interrupts_runs_once_on_the_restored_session() {
    let (cluster, _coordinator, mut first, _) = cluster_with(&[]).await;
    let base = cluster.url();
    let (_, session) = open(&cluster, &base, None, json!({"language": "python"})).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let (_, set) = run(&cluster, &base, None, &id, "runs = 0").await;
    assert_eq!(set["checkpoint"]["saved"], true, "{set}");
    // The first container holds the cell (a file only it has); a restored one lets it finish.
    let exec = |container: &str, args: &[&str]| {
        std::process::Command::new("docker")
            .args(["exec", "-u", "10002", container])
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let held = tests::session_containers(&id);
    assert_eq!(held.len(), 1);
    assert!(exec(&held[0], &["touch", "/tmp/hold"]));
    let slow = {
        let (http, base, id) = (cluster.http.clone(), base.clone(), id.clone());
        tokio::spawn(async move {
            let response = http
                .post(format!("{base}/v1/sessions/{id}/run"))
                .json(&json!({"code": "import os, time\nruns += 1\nopen('/work/started', 'w').close()\nwhile os.path.exists('/tmp/hold'):\n    time.sleep(0.05)\nruns", "timeout_ms": 600000}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        })
    };
    let deadline = Instant::now() + WITHIN;
    while !exec(&held[0], &["test", "-e", "/work/started"]) {
        assert!(Instant::now() < deadline, "the slow cell did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_second, _) = cluster.worker("second").await;
    wait_hosts(&cluster, 2).await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(60));
    // The call goes on: the session restored from before it, the cell run there once.
    let (status, answer) = slow.await.unwrap();
    assert_eq!((status, &answer["value"]), (200, &json!("1")), "{answer}");
    assert_eq!(answer["restored"]["after_cell"], 1, "{answer}");
    let (_, after) = run(&cluster, &base, None, &id, "runs").await;
    assert_eq!(after["value"], "1", "{after}");
    let (_, view) = call(
        &cluster,
        reqwest::Method::GET,
        format!("{base}/v1/sessions/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (&view["cells"], &view["restores"]),
        (&json!(3), &json!(1)),
        "{view}"
    );
    call(
        &cluster,
        reqwest::Method::DELETE,
        format!("{base}/v1/sessions/{id}"),
        None,
        None,
    )
    .await;
    tests::wait_session_containers_gone(&id).await;
    cluster.cleanup().await;
}
