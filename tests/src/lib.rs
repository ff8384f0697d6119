//! End-to-end tests against the real RabbitMQ, Redis and Docker started by scripts/cluster.
