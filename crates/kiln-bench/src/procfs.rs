//! The server process's CPU time and memory, read from Linux `/proc`.

use std::fs;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `AT_CLKTCK` in the ELF auxiliary vector: the unit of `/proc/PID/stat` times.
const AT_CLKTCK: u64 = 17;
/// The kernel's `USER_HZ` on every mainstream architecture, if auxv can't be read.
const DEFAULT_CLOCK_TICKS: u64 = 100;
/// How often resident memory is sampled during a run.
const RSS_SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// CPU time of a process (all its threads), in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    pub utime: u64,
    pub stime: u64,
}

impl CpuTicks {
    pub fn total(&self) -> u64 {
        self.utime + self.stime
    }
}

/// Memory figures from `/proc/PID/status`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the peak resident size since the process started.
    pub hwm: u64,
}

/// Clock ticks per second for `/proc` times, from this process's auxiliary vector
/// (what `sysconf(_SC_CLK_TCK)` returns), without any `unsafe`.
pub fn clock_ticks_per_second() -> u64 {
    let Ok(auxv) = fs::read("/proc/self/auxv") else {
        return DEFAULT_CLOCK_TICKS;
    };
    let words: Vec<u64> = auxv
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            u64::from_ne_bytes(b)
        })
        .collect();
    words
        .chunks_exact(2)
        .find(|kv| kv[0] == AT_CLKTCK)
        .map(|kv| kv[1])
        .filter(|&t| t > 0)
        .unwrap_or(DEFAULT_CLOCK_TICKS)
}

/// Reads `utime` and `stime` (fields 14 and 15) of `/proc/PID/stat`.
pub fn cpu_ticks(pid: u32) -> Result<CpuTicks> {
    let text = read_proc(pid, "stat")?;
    parse_stat(&text).ok_or_else(|| Error::Proc {
        pid,
        file: "stat",
        reason: "no utime/stime fields".to_owned(),
    })
}

/// Reads `VmRSS` and `VmHWM` of `/proc/PID/status`.
pub fn memory(pid: u32) -> Result<Memory> {
    let text = read_proc(pid, "status")?;
    parse_status(&text).ok_or_else(|| Error::Proc {
        pid,
        file: "status",
        reason: "no VmRSS/VmHWM lines".to_owned(),
    })
}

fn read_proc(pid: u32, file: &'static str) -> Result<String> {
    fs::read_to_string(format!("/proc/{pid}/{file}")).map_err(|e| Error::Proc {
        pid,
        file,
        reason: e.to_string(),
    })
}

/// Parses the fields after the command name, which is parenthesised and may itself
/// contain spaces and parentheses (so the split is at the *last* `)`).
pub fn parse_stat(text: &str) -> Option<CpuTicks> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime = fields.nth(11)?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some(CpuTicks { utime, stime })
}

pub fn parse_status(text: &str) -> Option<Memory> {
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        let value = line[key.len()..].trim().trim_end_matches("kB").trim();
        value.parse::<u64>().ok().map(|k| k * 1024)
    };
    Some(Memory {
        rss: kib("VmRSS:")?,
        hwm: kib("VmHWM:")?,
    })
}

/// What the server process used during a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerUsage {
    pub pid: u32,
    /// utime + stime of all threads between the run's start and end.
    pub cpu_seconds: f64,
    /// `VmHWM` at the end of the run (peak since the process started).
    pub peak_rss_bytes: u64,
    /// Largest `VmRSS` seen while sampling during the run.
    pub max_sampled_rss_bytes: u64,
}

/// Samples a process: CPU time at start and finish, resident memory in between.
pub struct ProcessSampler {
    pid: u32,
    ticks_per_second: u64,
    start: CpuTicks,
    stop: Sender<()>,
    rss_thread: JoinHandle<u64>,
}

impl ProcessSampler {
    /// Reads the process's CPU time now and starts sampling its resident memory.
    pub fn start(pid: u32) -> Result<Self> {
        let start = cpu_ticks(pid)?;
        let first = memory(pid)?.rss;
        let (stop, stopped) = mpsc::channel::<()>();
        let rss_thread = std::thread::spawn(move || {
            let mut max = first;
            loop {
                match stopped.recv_timeout(RSS_SAMPLE_PERIOD) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return max,
                }
                match memory(pid) {
                    Ok(m) => max = max.max(m.rss),
                    Err(_) => return max,
                }
            }
        });
        Ok(ProcessSampler {
            pid,
            ticks_per_second: clock_ticks_per_second(),
            start,
            stop,
            rss_thread,
        })
    }

    /// Stops sampling and reports the CPU time used since [`ProcessSampler::start`].
    pub fn finish(self) -> Result<ServerUsage> {
        let end = cpu_ticks(self.pid);
        let mem = memory(self.pid);
        // The thread ends on the message or when the channel drops, so a failed send
        // only means it already ended.
        let _ = self.stop.send(());
        let sampled = self.rss_thread.join().unwrap_or(0);
        let (end, mem) = (end?, mem?);
        let ticks = end.total().saturating_sub(self.start.total());
        Ok(ServerUsage {
            pid: self.pid,
            cpu_seconds: ticks as f64 / self.ticks_per_second as f64,
            peak_rss_bytes: mem.hwm,
            max_sampled_rss_bytes: sampled.max(mem.rss),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_command_name() {
        let line = "1234 (my (odd) srv) S 1 1234 1234 0 -1 4194560 500 0 0 0 731 42 0 0 20 0 \
                    3 0 100 1000000 2000 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(CpuTicks {
                utime: 731,
                stime: 42
            })
        );
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn status_memory_lines() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t3\n";
        assert_eq!(
            parse_status(text),
            Some(Memory {
                rss: 1024 * 1024,
                hwm: 2048 * 1024
            })
        );
        assert_eq!(parse_status("Name:\tkthread\n"), None);
    }
}
