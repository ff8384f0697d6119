//! HTTP API: validates requests, publishes tasks, answers with results.
