//! Kiln's serving benchmark client: measures any OpenAI-compatible server (Kiln,
//! llama.cpp's `llama-server`, vLLM) over HTTP, following vLLM's serving-benchmark method.
//!
//! 1. [`Workload`]: ShareGPT V3 ([`ShareGpt`], repaired from the truncated file the
//!    catalogue ships) shuffled with a fixed seed, first turns as prompts, the replies'
//!    token counts (with the model's own tokenizer, [`GgufTokenCounter`]) as targets,
//!    length-filtered, saved as JSON so that two servers get byte-identical requests;
//!    or the code-edit workload ([`Workload::code_edit`]): Kiln's own source files to
//!    return with one function renamed, the output a near-copy of the prompt.
//! 2. [`run()`]: every request streamed (`max_tokens` = target, `temperature` 0,
//!    `ignore_eos`, usage included), all released at once behind a concurrency cap or at
//!    a Poisson rate; per request TTFT, inter-token latencies, end-to-end latency and
//!    token counts ([`RequestRecord`]).
//! 3. [`RunReport`]: throughput over the wall time, latency percentiles, and the server
//!    process's CPU time and peak memory from `/proc`; [`Comparison`] gives B/A ratios
//!    and Markdown tables; [`plot::draw_all`] draws SVG plots.
//!
//! The serving benchmark never links the engine: it sees servers only through HTTP and
//! `/proc`.
//!
//! [`kernels`] is the other benchmark, `kiln bench kernels`: the backend's matmul and
//! the kernels' f32 ops, timed through their public APIs, against the machine's int8,
//! FMA and memory-bandwidth ceilings measured in the same run.
//!
//! ```no_run
//! use kiln_bench::{block_on, run, RunConfig, Workload};
//!
//! let workload = Workload::load("workload.json".as_ref())?;
//! let mut config = RunConfig::new("kiln", "http://127.0.0.1:8080", "smollm2-135m-instruct");
//! config.max_concurrency = Some(8);
//! let report = block_on(run(&workload, &config))??;
//! println!("{}", report.table());
//! # Ok::<(), kiln_bench::Error>(())
//! ```

mod client;
mod code_edit;
mod compare;
mod dataset;
mod error;
pub mod kernels;
pub mod plot;
pub mod procfs;
mod report;
mod run;
mod server;
mod sse;
mod stats;
mod sweep;
mod tokens;
mod wire;
mod workload;

pub use client::{FailureKind, RequestRecord};
pub use code_edit::{all_edits, CodeEdit, CODE_EDIT_DATASET};
pub use compare::{
    markdown_row, markdown_runs, metrics, ratios, ComparedPair, Comparison, MetricRatio,
    COMPARE_FORMAT,
};
pub use dataset::{fetch_sharegpt, Conversation, DatasetStats, ShareGpt, SHAREGPT_CATALOG_NAME};
pub use error::{Error, Result};
pub use procfs::ServerUsage;
pub use report::{save_runs, RunReport, WorkloadInfo, REPORT_FORMAT};
pub use run::{arrival_offsets, block_on, run, RunConfig};
pub use server::{ServerCommand, SpawnedServer};
pub use sse::{SseEvent, SseReader};
pub use stats::{percentile, Summary};
pub use sweep::{sweep, ServerTarget};
pub use tokens::GgufTokenCounter;
pub use wire::{parse_extra_body, request_body, Endpoint};
pub use workload::{
    shuffle, LengthFilter, TokenCounter, Workload, WorkloadRequest, SAMPLER, WORKLOAD_FORMAT,
};
