//! Which images a worker needs: the warm-at-start languages' images to be ready at all; a
//! lazy language's image only at its first execution, which until the image is built fails
//! with the command that builds it (what `scripts/demo` relies on while it builds the other
//! languages in the background).

use std::process::Command;

use proto::{Language, Status};
use sandbox::Sandbox;
use tests::TestSandbox;

/// An image prefix under which only the Python image exists (a tag of the real one), removed
/// again on drop.
struct OnlyPython {
    prefix: String,
}

impl OnlyPython {
    fn new() -> Self {
        let prefix = format!(
            "codegen-test-{}-",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let status = Command::new("docker")
            .args([
                "tag",
                "codegen-sandbox-python:latest",
                &format!("{prefix}python:latest"),
            ])
            .status()
            .expect("docker CLI");
        assert!(status.success(), "docker tag of the python image");
        Self { prefix }
    }
}

impl Drop for OnlyPython {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", &format!("{}python:latest", self.prefix)])
            .output();
    }
}

#[tokio::test]
async fn a_lazy_languages_missing_image_fails_only_its_own_executions() {
    let images = OnlyPython::new();
    let sandbox = TestSandbox::start(sandbox::Options {
        image_prefix: images.prefix.clone(),
        languages: "python,rust".into(),
        ..TestSandbox::options(1)
    })
    .await;
    assert_eq!(
        sandbox.sandbox.health().await,
        Ok(()),
        "rust is lazy: its image is not needed to be ready"
    );

    let mut request = TestSandbox::request("fn main() {}");
    request.language = Language::Rust;
    let error = sandbox
        .sandbox
        .run(&request)
        .await
        .expect_err("no rust image under this prefix");
    let message = error.to_string();
    assert!(!error.is_retryable(), "{message}");
    assert!(
        message.contains(&format!("{}rust:latest", images.prefix))
            && message.contains("sandbox-images/build rust"),
        "names the image and the command that builds it: {message}"
    );

    // Python runs on, and the worker stays ready.
    let result = sandbox.run("print('still served')").await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(sandbox.sandbox.health().await, Ok(()));
    sandbox.stop().await;
}

#[tokio::test]
async fn a_warm_languages_missing_image_makes_the_worker_unready() {
    let images = OnlyPython::new();
    // No warm-up (pool size 0): bash's containers could never start.
    let sandbox = TestSandbox::start(sandbox::Options {
        image_prefix: images.prefix.clone(),
        languages: "python,bash".into(),
        ..TestSandbox::options(0)
    })
    .await;
    let health = sandbox.sandbox.health().await;
    let message = health.expect_err("bash is warm at start: its image is needed");
    assert!(
        message.contains(&format!("{}bash:latest", images.prefix)),
        "names the missing image: {message}"
    );
    sandbox.stop().await;
}
