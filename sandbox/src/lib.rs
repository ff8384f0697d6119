//! Runs untrusted code in hardened Docker containers (bollard), behind a trait with a scripted fake.
