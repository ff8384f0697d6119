//! Logging, Prometheus metrics and the health/readiness endpoints every process serves.
