//! Runs at several concurrencies against one server, started by the benchmark or not.

use crate::error::Result;
use crate::report::RunReport;
use crate::run::{self, RunConfig};
use crate::server::{ServerCommand, SpawnedServer};
use crate::workload::Workload;

/// The server a sweep measures.
#[derive(Debug, Clone)]
pub enum ServerTarget {
    /// Already running at `base_url`; `pid` (if known) is measured in `/proc`.
    Running { base_url: String, pid: Option<u32> },
    /// Started for the sweep (once, for all its concurrencies) and stopped after it.
    Spawn(ServerCommand),
}

/// Runs `workload` once per entry of `concurrencies` (`None` = no cap) against `target`,
/// in order, calling `on_run` after each. `base` supplies every other setting; its URL
/// and pid are replaced by the target's.
pub async fn sweep(
    target: &ServerTarget,
    workload: &Workload,
    base: &RunConfig,
    concurrencies: &[Option<usize>],
    on_run: &mut dyn FnMut(&RunReport),
) -> Result<Vec<RunReport>> {
    let mut config = base.clone();
    let server = match target {
        ServerTarget::Running { base_url, pid } => {
            config.base_url.clone_from(base_url);
            config.server_pid = *pid;
            None
        }
        ServerTarget::Spawn(cmd) => {
            let server = SpawnedServer::start(cmd).await?;
            config.base_url.clone_from(&cmd.base_url);
            config.server_pid = Some(server.pid());
            Some(server)
        }
    };
    let mut reports = Vec::with_capacity(concurrencies.len());
    for &c in concurrencies {
        config.max_concurrency = c;
        let report = run::run(workload, &config).await?;
        on_run(&report);
        reports.push(report);
    }
    if let Some(server) = server {
        server.stop();
    }
    Ok(reports)
}
