//! CPU time of processes, from /proc: the server's and the load generator's, for CPU per
//! request.

/// Linux's USER_HZ: /proc reports CPU times in these ticks.
const TICKS_PER_SEC: f64 = 100.0;

/// A process's user+system CPU seconds so far.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / TICKS_PER_SEC)
}
