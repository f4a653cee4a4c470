//! The broker process as Linux's `/proc` shows it: resident memory and CPU time.

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux architecture
/// this runs on).
const USER_HZ: f64 = 100.0;

/// Resident set size of `pid`, KiB; `None` if the process is gone.
pub(crate) fn rss_kb(pid: u32) -> Option<u64> {
    status_field(pid, "VmRSS:")
}

/// Peak resident set size of `pid` over its life, KiB.
pub(crate) fn hwm_kb(pid: u32) -> Option<u64> {
    status_field(pid, "VmHWM:")
}

fn status_field(pid: u32, name: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// User + system CPU seconds `pid` has used (all threads, children not included).
pub(crate) fn cpu_s(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3; utime and stime are fields 14 and 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// CPU seconds of several processes together (missing ones count 0).
pub(crate) fn cpu_total(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&p| cpu_s(p)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        // Other tests allocate meanwhile: read the current size first, the peak after it (the
        // peak never falls, so it is at least any size read before it).
        let rss = rss_kb(me).unwrap_or(0);
        assert!(rss > 0, "a live process has resident memory");
        assert!(hwm_kb(me).unwrap_or(0) >= rss, "peak is at least an earlier current size");
        assert!(cpu_s(me).is_some(), "/proc/self/stat parses");
    }
}
