//! Wall-clock time as the processes exchange it: milliseconds (or microseconds, for the
//! timings of a task's queue wait) since the Unix epoch.

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Now, in microseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
