//! Packages in sessions, offline (real RabbitMQ, Redis, Docker, pip): wheels from the
//! operator's source (here a folder of wheels this test builds, one holding compiled code),
//! only allowed names (a dependency that is not allowed is refused by name), resolved and
//! installed on the worker's side once, then mounted read-only into every session that asks
//! for the same set; a language without a package source, a requirement pip would read as an
//! option, and a package that does not exist are refused naming it.

use std::path::Path;

use serde_json::{Value, json};

use crate::sessions::{open, run};

/// Builds the test's wheels into `dir`: cgcalc (depends on cgdep), cgdep, cgnative (a shared
/// library of compiled code, loaded with ctypes), cgwants (depends on cgblocked, which is
/// there but not allowed).
pub(crate) fn build_wheels(dir: &Path) {
    let library = dir.join("libanswer.so");
    let source = dir.join("answer.c");
    std::fs::write(&source, "int answer(void) { return 42; }\n").unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("a C compiler");
    assert!(status.success());
    const SCRIPT: &str = r#"
import base64, hashlib, sys, zipfile
out, library = sys.argv[1], sys.argv[2]

def wheel(name, files, requires=(), tag="py3-none-any"):
    dist = "%s-1.0.dist-info" % name
    files = dict(files)
    files[dist + "/METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name
        + "".join("Requires-Dist: %s\n" % r for r in requires)).encode()
    files[dist + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: %s\nTag: %s\n"
        % ("true" if tag.startswith("py3") else "false", tag)).encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile("%s/%s-1.0-%s.whl" % (out, name, tag), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)

wheel("cgdep", {"cgdep/__init__.py": b"PI = 3.0\n"})
wheel("cgcalc", {"cgcalc/__init__.py": b"import cgdep\ndef area(r):\n    return cgdep.PI * r * r\n"},
      requires=["cgdep"])
native = open(library, "rb").read()
wheel("cgnative", {"cgnative/__init__.py":
    b"import ctypes, os\n_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libanswer.so'))\n"
    b"def answer():\n    return _lib.answer()\n",
    "cgnative/libanswer.so": native}, tag="cp311-cp311-linux_x86_64")
wheel("cgblocked", {"cgblocked/__init__.py": b"X = 1\n"})
wheel("cgwants", {"cgwants/__init__.py": b"import cgblocked\n"}, requires=["cgblocked"])
"#;
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let status = std::process::Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .arg(&wheels)
        .arg(&library)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn allowed_packages_install_once_from_the_operators_source_and_load_read_only() {
    let wheels = tempfile::tempdir().unwrap();
    build_wheels(wheels.path());
    let cluster = tests::Cluster::new();
    let cache = cluster.dir.path().join("packages");
    std::fs::write(
        cluster.dir.path().join("codegen.toml"),
        format!(
            "[worker.sessions.packages]\nfind_links = {:?}\nallow = [\"cgcalc\", \"cg?ep\", \"cgnative\", \"cgwants\"]\npip = [\"/usr/bin/python3\", \"-m\", \"pip\"]\ncache_dir = {:?}\n",
            wheels.path().join("wheels").display().to_string(),
            cache.display().to_string()
        ),
    )
    .unwrap();
    let _coordinator = cluster.coordinator().await;
    let (_worker, ops) = cluster.worker("worker").await;
    let base = cluster.url();

    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, session) = open(
            &cluster,
            &base,
            None,
            json!({"language": "python", "packages": ["cgcalc==1.0", "cgnative"]}),
        )
        .await;
        assert_eq!(status, 201, "{session}");
        assert_eq!(
            session["packages"],
            json!(["cgcalc==1.0", "cgnative"]),
            "{session}"
        );
        let id = session["id"].as_str().unwrap().to_owned();
        // Imported from the read-only mount, its dependency too, compiled code loading.
        let (_, used) = run(
            &cluster,
            &base,
            None,
            &id,
            "import cgcalc, cgnative, cgdep\n(cgcalc.area(2), cgnative.answer(), cgdep.__file__)",
        )
        .await;
        assert_eq!(
            (&used["status"], &used["value"]),
            (
                &json!("ok"),
                &json!("(12.0, 42, '/opt/packages/cgdep/__init__.py')")
            ),
            "{used}"
        );
        // Mounted read-only (and the program cannot write a file of it either way).
        let (_, write) = run(
            &cluster,
            &base,
            None,
            &id,
            "open('/opt/packages/cgdep/__init__.py', 'a').write('PI = 4')",
        )
        .await;
        assert_eq!(write["status"], "error", "{write}");
        let (_, mount) = run(
            &cluster,
            &base,
            None,
            &id,
            "[l.split()[5].split(',')[0] for l in open('/proc/self/mountinfo') if l.split()[4] == '/opt/packages']",
        )
        .await;
        assert_eq!(mount["value"], "['ro']", "{mount}");
        ids.push(id);
    }
    // The second session's set came from the cache: one install, one hit; each wheel once.
    for (result, expected) in [("installed", 1.0), ("cached", 1.0), ("refused", 0.0)] {
        assert_eq!(
            tests::metric(
                &cluster.http,
                &ops,
                &format!("codegen_session_package_installs_total{{result=\"{result}\"}}")
            )
            .await,
            expected,
            "{result}"
        );
    }
    assert_eq!(std::fs::read_dir(cache.join("wheels")).unwrap().count(), 3);

    // Refusals, each naming the package or the field.
    for (body, names) in [
        (
            json!({"language": "bash", "packages": ["jq"]}),
            "not offered in bash",
        ),
        (
            json!({"language": "python", "packages": ["cgwants"]}),
            "package cgblocked is not allowed",
        ),
        (
            json!({"language": "python", "packages": ["cgmissing==2.0"]}),
            "cgmissing",
        ),
        (
            json!({"language": "python", "packages": ["--index-url=http://127.0.0.1:1/"]}),
            "not a requirement",
        ),
    ] {
        let (status, refused): (u16, Value) = open(&cluster, &base, None, body.clone()).await;
        assert_eq!(
            (status, refused["param"].as_str()),
            (422, Some("packages")),
            "{body}: {refused}"
        );
        assert!(
            refused["error"].as_str().unwrap().contains(names),
            "{body}: {refused}"
        );
    }
    for id in &ids {
        cluster
            .http
            .delete(format!("{base}/v1/sessions/{id}"))
            .send()
            .await
            .unwrap();
        tests::wait_session_containers_gone(id).await;
    }
    cluster.cleanup().await;
}
