//! Consumes tasks, runs them in the sandbox, stores results, acks.
