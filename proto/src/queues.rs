//! RabbitMQ names. Every name is derived from one configurable prefix so that several clusters
//! (or test runs) can share a broker without seeing each other's messages.

/// Names of the exchanges and queues of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Durable quorum queue that workers consume pipeline tasks from.
    pub tasks: String,
    /// Durable quorum queue of plain executions, apart from pipeline tasks so that a burst of
    /// generation jobs never delays an evaluation run (and the other way round).
    pub executions: String,
    /// Dead-letter exchange the task queue routes rejected and over-delivered messages to.
    pub dead_letter_exchange: String,
    /// Durable quorum queue bound to the dead-letter exchange.
    pub dead_letters: String,
}

impl Topology {
    pub fn new(prefix: &str) -> Self {
        Self {
            tasks: format!("{prefix}.tasks"),
            executions: format!("{prefix}.executions"),
            dead_letter_exchange: format!("{prefix}.dlx"),
            dead_letters: format!("{prefix}.tasks.dead"),
        }
    }

    /// The queue of a tenant's share of a work queue (`tasks` or `executions`): each tenant's
    /// work waits in a queue of its own, so workers can take it by weight rather than by
    /// arrival. Work of no tenant (an open API) stays in `work` itself.
    pub fn lane(work: &str, tenant: Option<&str>) -> String {
        match tenant {
            Some(tenant) => format!("{work}.tenant.{tenant}"),
            None => work.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix() {
        let t = Topology::new("codegen");
        assert_eq!(t.tasks, "codegen.tasks");
        assert_eq!(t.dead_letter_exchange, "codegen.dlx");
        assert_eq!(t.dead_letters, "codegen.tasks.dead");
        assert_ne!(Topology::new("a").tasks, Topology::new("b").tasks);
        // A tenant named like another queue's suffix cannot land in that queue.
        assert_eq!(
            Topology::lane(&t.tasks, Some("dead")),
            "codegen.tasks.tenant.dead"
        );
        assert_ne!(Topology::lane(&t.tasks, Some("dead")), t.dead_letters);
        assert_eq!(Topology::lane(&t.executions, None), t.executions);
    }
}
