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
    /// Durable quorum queue of pipeline events (workers → coordinators).
    pub events: String,
}

impl Topology {
    pub fn new(prefix: &str) -> Self {
        Self {
            tasks: format!("{prefix}.tasks"),
            executions: format!("{prefix}.executions"),
            dead_letter_exchange: format!("{prefix}.dlx"),
            dead_letters: format!("{prefix}.tasks.dead"),
            events: format!("{prefix}.events"),
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
    }
}
