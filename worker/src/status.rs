//! What this worker says about itself with its presence (`proto::api::WorkerStatus`): read
//! from its own metrics registry, so the cluster page shows the figures `/metrics` does and
//! nothing is counted twice.

use std::collections::BTreeMap;

use prometheus::proto::MetricFamily;
use proto::api::{ModelStatus, PoolStatus, WorkerStatus};

/// The status in `families` (a `Registry::gather`), as of `at_ms`.
pub(crate) fn of(
    families: &[MetricFamily],
    started_ms: u64,
    at_ms: u64,
    unable: Option<String>,
) -> WorkerStatus {
    let mut status = WorkerStatus {
        started_ms,
        at_ms,
        unable,
        ..WorkerStatus::default()
    };
    let mut pools: BTreeMap<String, PoolStatus> = BTreeMap::new();
    let mut models: BTreeMap<(String, String), ModelStatus> = BTreeMap::new();
    for family in families {
        for metric in family.get_metric() {
            let label = |name: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            let gauge = metric.get_gauge().get_value().max(0.0) as u64;
            let counter = metric.get_counter().get_value().max(0.0) as u64;
            let key = (label("provider"), label("model"));
            match family.name() {
                "codegen_worker_tasks_in_flight" => status.in_flight += gauge,
                "codegen_sessions_held" => status.sessions += gauge,
                "codegen_worker_tasks_total" => {
                    *status.tasks.entry(label("outcome")).or_default() += counter;
                }
                "codegen_sandbox_runs_total" => {
                    *status.sandbox_runs.entry(label("status")).or_default() += counter;
                }
                "codegen_model_concurrency_limit" => model(&mut models, key).limit = gauge,
                "codegen_model_calls_in_flight" => model(&mut models, key).in_flight += gauge,
                "codegen_model_calls_total" => {
                    let calls = &mut model(&mut models, key).calls;
                    *calls.entry(label("outcome")).or_default() += counter;
                }
                name @ ("codegen_sandbox_pool_size"
                | "codegen_sandbox_pool_idle"
                | "codegen_sandbox_pool_live"
                | "codegen_sandbox_pool_waiting") => {
                    let language = label("language");
                    let pool = pools.entry(language.clone()).or_insert(PoolStatus {
                        language,
                        size: 0,
                        idle: 0,
                        live: 0,
                        waiting: 0,
                    });
                    let field = match name {
                        "codegen_sandbox_pool_size" => &mut pool.size,
                        "codegen_sandbox_pool_idle" => &mut pool.idle,
                        "codegen_sandbox_pool_live" => &mut pool.live,
                        _ => &mut pool.waiting,
                    };
                    *field = gauge;
                }
                _ => {}
            }
        }
    }
    status.pools = pools.into_values().collect();
    // One model per worker; the first by name should a process ever hold two.
    status.model = models.into_values().next();
    status
}

/// The model of `key` (provider, model) in `models`, added when new.
fn model(
    models: &mut BTreeMap<(String, String), ModelStatus>,
    key: (String, String),
) -> &mut ModelStatus {
    models.entry(key.clone()).or_insert_with(|| ModelStatus {
        provider: key.0,
        model: key.1,
        limit: 0,
        in_flight: 0,
        calls: BTreeMap::new(),
    })
}

#[cfg(test)]
mod tests {
    use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

    use super::*;

    #[test]
    fn the_status_reads_the_figures_metrics_shows() {
        let registry = Registry::new();
        let in_flight = IntGauge::new("codegen_worker_tasks_in_flight", "h").unwrap();
        let tasks = IntCounterVec::new(
            Opts::new("codegen_worker_tasks_total", "h"),
            &["kind", "outcome"],
        )
        .unwrap();
        let idle =
            IntGaugeVec::new(Opts::new("codegen_sandbox_pool_idle", "h"), &["language"]).unwrap();
        let size =
            IntGaugeVec::new(Opts::new("codegen_sandbox_pool_size", "h"), &["language"]).unwrap();
        let limit = IntGaugeVec::new(
            Opts::new("codegen_model_concurrency_limit", "h"),
            &["provider", "model"],
        )
        .unwrap();
        let calls = IntGaugeVec::new(
            Opts::new("codegen_model_calls_in_flight", "h"),
            &["provider", "model"],
        )
        .unwrap();
        for c in [
            Box::new(in_flight.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tasks.clone()),
            Box::new(idle.clone()),
            Box::new(size.clone()),
            Box::new(limit.clone()),
            Box::new(calls.clone()),
        ] {
            registry.register(c).unwrap();
        }
        in_flight.set(3);
        tasks.with_label_values(&["plan", "completed"]).inc_by(2);
        tasks
            .with_label_values(&["implement", "completed"])
            .inc_by(5);
        tasks.with_label_values(&["implement", "requeued"]).inc();
        idle.with_label_values(&["python"]).set(2);
        size.with_label_values(&["python"]).set(4);
        size.with_label_values(&["go"]).set(1);
        limit.with_label_values(&["openai", "m"]).set(8);
        calls.with_label_values(&["openai", "m"]).set(6);

        let status = of(&registry.gather(), 1, 2, None);
        assert_eq!(status.in_flight, 3);
        assert_eq!(status.tasks["completed"], 7);
        assert_eq!(status.tasks["requeued"], 1);
        let languages: Vec<_> = status.pools.iter().map(|p| p.language.as_str()).collect();
        assert_eq!(languages, ["go", "python"]);
        assert_eq!((status.pools[1].size, status.pools[1].idle), (4, 2));
        let model = status.model.unwrap();
        assert_eq!(
            (model.model.as_str(), model.limit, model.in_flight),
            ("m", 8, 6)
        );
    }
}
