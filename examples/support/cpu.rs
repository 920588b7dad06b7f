//! CPU time of a process, for the benchmarks.

/// CPU time every thread of process `pid` (a number, or `self`) has run so
/// far, in nanoseconds (`/proc/PID/task/*/schedstat`).
pub fn cpu_ns(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
