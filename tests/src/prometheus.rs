//! A Prometheus server of the test's own: Debian's package's binary (extracted by
//! `scripts/test` into `.cluster/tools/prometheus`, as promtool is), scraping the given
//! targets every second and serving the project's console pages (`deploy/prometheus/consoles`)
//! with Debian's console libraries, as the compose stack's Prometheus does.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, root};

/// The extracted Debian package.
fn package() -> PathBuf {
    root().join(".cluster/tools/prometheus")
}

#[derive(Debug)]
pub struct Prometheus {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts it scraping `targets` (`host:port`, their `/metrics`) and waits until it answers.
    pub fn start(targets: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: codegen\n    static_configs:\n      - targets: [{list}]\n"
            ),
        )
        .expect("write the scrape configuration");
        let port = free_port();
        let binary = package().join("usr/bin/prometheus");
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!(
                "--web.console.templates={}",
                root().join("deploy/prometheus/consoles").display()
            ))
            .arg(format!(
                "--web.console.libraries={}",
                package()
                    .join("usr/share/doc/prometheus/examples/console_libraries")
                    .display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/test extracts it)", binary.display()));
        // Ready, not only listening: it answers 503 until its storage is open (on a busy
        // machine, for a while). The deadline only bounds a failure.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !ready(port) {
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            port,
            child,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the Prometheus on `port` answers `/-/ready` with 200.
fn ready(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET /-/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}
