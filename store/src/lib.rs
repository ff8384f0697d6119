//! Redis state (results, metadata, completion notices) behind a trait, with an in-memory fake.
