//! Configuration: built-in defaults → `codegen.toml` → `CODEGEN__SECTION__KEY` environment.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Everything a `codegen` process can be configured with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub coordinator: coordinator::Options,
    pub worker: worker::Options,
    pub broker: broker::Options,
    pub store: store::Options,
    pub sandbox: sandbox::Options,
    pub model: model::Options,
    pub memory: memory::Options,
    pub log: telemetry::LogOptions,
    pub telemetry: telemetry::TraceOptions,
}

impl Settings {
    /// Loads the settings. An explicitly named file must exist; `./codegen.toml` is optional.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_from(file, config::Environment::with_prefix("CODEGEN"))
    }

    fn load_from(file: Option<&Path>, env: config::Environment) -> anyhow::Result<Self> {
        let file_source = match file {
            Some(path) => config::File::from(path).required(true),
            None => config::File::with_name("codegen.toml")
                .format(config::FileFormat::Toml)
                .required(false),
        };
        let built = config::Config::builder()
            .add_source(file_source)
            .add_source(
                env.prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    // The lists an operator sets from the environment: space-separated.
                    .list_separator(" ")
                    .with_list_parse_key("worker.sessions.packages.allow")
                    .with_list_parse_key("worker.sessions.packages.pip")
                    .with_list_parse_key("worker.sessions.packages.platforms"),
            )
            .build()
            .context("reading configuration")?;
        built
            .try_deserialize()
            .context("invalid configuration (file or CODEGEN__* environment)")
    }

    pub fn to_toml(&self) -> anyhow::Result<String> {
        toml::to_string_pretty(self).context("rendering configuration")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Write;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> config::Environment {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config::Environment::with_prefix("CODEGEN").source(Some(map))
    }

    #[test]
    fn the_example_configuration_lists_every_default() {
        let example = include_str!("../../deploy/codegen.example.toml");
        let body: String = example
            .lines()
            .skip_while(|l| l.starts_with('#') || l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body,
            Settings::default().to_toml().unwrap(),
            "deploy/codegen.example.toml is stale: regenerate it with `codegen config`"
        );
    }

    #[test]
    fn defaults_then_file_then_environment() {
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        writeln!(
            file,
            "[broker]\ndelivery_limit = 7\nprefix = \"from-file\"\n[worker]\nconcurrency = 3"
        )
        .unwrap();
        let settings = Settings::load_from(
            Some(file.path()),
            env(&[
                ("CODEGEN__BROKER__PREFIX", "from-env"),
                ("CODEGEN__COORDINATOR__LISTEN", "127.0.0.1:9999"),
                ("CODEGEN__STORE__RESULT_TTL", "2h"),
            ]),
        )
        .unwrap();
        assert_eq!(settings.broker.delivery_limit, 7, "file over default");
        assert_eq!(settings.broker.prefix, "from-env", "environment over file");
        assert_eq!(settings.worker.concurrency, 3);
        assert_eq!(settings.coordinator.listen.port(), 9999);
        assert_eq!(settings.store.result_ttl.as_secs(), 7200);
        assert_eq!(
            settings.sandbox.pids_limit,
            sandbox::Options::default().pids_limit
        );
    }

    #[test]
    fn package_lists_come_from_the_environment_space_separated() {
        let settings = Settings::load_from(
            None,
            env(&[
                (
                    "CODEGEN__WORKER__SESSIONS__PACKAGES__ALLOW",
                    "sympy mpmath scikit-*",
                ),
                (
                    "CODEGEN__WORKER__SESSIONS__PACKAGES__PIP",
                    "/usr/bin/python3 -m pip",
                ),
                ("CODEGEN__BROKER__PREFIX", "one two"),
            ]),
        )
        .unwrap();
        let packages = &settings.worker.sessions.packages;
        assert_eq!(packages.allow, ["sympy", "mpmath", "scikit-*"]);
        assert_eq!(packages.pip, ["/usr/bin/python3", "-m", "pip"]);
        assert_eq!(
            settings.broker.prefix, "one two",
            "other strings stay whole"
        );
    }

    #[test]
    fn the_model_api_key_comes_from_the_environment_and_is_never_printed() {
        let settings = Settings::load_from(
            None,
            env(&[
                ("CODEGEN__MODEL__PROVIDER", "anthropic"),
                ("CODEGEN__MODEL__API_KEY", "sk-secret"),
            ]),
        )
        .unwrap();
        assert_eq!(settings.model.provider, model::ProviderKind::Anthropic);
        assert_eq!(settings.model.api_key.as_deref(), Some("sk-secret"));
        assert!(!settings.to_toml().unwrap().contains("sk-secret"));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let err = Settings::load_from(None, env(&[("CODEGEN__BROKER__URLL", "x")])).unwrap_err();
        assert!(format!("{err:#}").contains("urll"), "{err:#}");
        let err = Settings::load_from(None, env(&[("CODEGEN__WORKER__CONCURRENCY", "many")]))
            .unwrap_err();
        assert!(format!("{err:#}").contains("concurrency"), "{err:#}");
    }

    #[test]
    fn a_named_file_must_exist() {
        assert!(
            Settings::load_from(Some(Path::new("/nonexistent/codegen.toml")), env(&[])).is_err()
        );
    }

    #[test]
    fn effective_configuration_renders_and_reloads() {
        let rendered = Settings::default().to_toml().unwrap();
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        file.write_all(rendered.as_bytes()).unwrap();
        let reloaded = Settings::load_from(Some(file.path()), env(&[])).unwrap();
        assert_eq!(
            reloaded.coordinator.listen,
            Settings::default().coordinator.listen
        );
    }
}
