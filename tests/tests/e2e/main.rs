//! Every end-to-end test, in one binary: one link instead of one per file, which on a
//! fresh two-core machine was minutes of the test build. Each module is one subject; nextest
//! names a test `module::test` (select a module with `-E 'test(/^outages::/)'`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod agent;
mod agent_hostile;
mod broker_failover;
mod cli_agent;
mod cli_jobs;
mod cli_sessions;
mod cluster_script;
mod console;
mod control;
mod deploy_files;
mod executions;
mod executions_eval;
mod fairness;
mod generation_languages;
mod generation_modes;
mod generation_stubs;
mod idempotency;
mod index_store;
mod job_store;
mod jobs;
mod jobs_reliability;
mod languages;
mod lesson_store;
mod lessons_api;
mod mcp;
mod memory;
mod metrics;
mod model_cluster;
mod model_limits;
mod openapi;
mod outages;
mod pipeline_in_process;
mod quotas;
mod real_model;
mod sandbox_hostile;
mod sandbox_images;
mod sandbox_pool;
mod session_store;
mod sessions;
mod sessions_jupyter;
mod sessions_packages;
mod sessions_restore;
mod sessions_restore_edges;
mod silent_partitions;
mod stack_faults;
mod tenants;
mod traces;
mod usage;
mod verdicts;
mod webhooks;
