//! `kiln batch`: a JSONL file of requests run as an OpenAI batch on a server (Kiln's or
//! any with the Files and Batch APIs): upload the file, create the batch, show its
//! progress, then write the output and error files beside the input. The batch lives on
//! the server: interrupting this command leaves it running, and `--batch-id` picks it up
//! again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln_api::batches::{Batch, CreateBatch};
use kiln_api::files::FileObject;
use reqwest::multipart::{Form, Part};
use reqwest::{Client, RequestBuilder, Response};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSONL file of requests, one `{"custom_id", "method": "POST", "url", "body"}` a line
    /// (not needed with --batch-id)
    #[arg(required_unless_present = "batch_id")]
    input: Option<PathBuf>,

    /// Endpoint every line runs on: /v1/chat/completions, /v1/completions or
    /// /v1/embeddings [default: the first line's `url`]
    #[arg(long)]
    endpoint: Option<String>,

    /// Server base URL
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,

    /// API key, sent as a bearer token
    #[arg(long, env = "KILN_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Time the server has to finish the batch, e.g. 24h
    #[arg(long, default_value = "24h")]
    completion_window: String,

    /// Where to write the answered lines [default: <input>.output.jsonl]
    #[arg(long, value_name = "PATH")]
    output: Option<PathBuf>,

    /// Where to write the failed lines [default: <input>.errors.jsonl]
    #[arg(long, value_name = "PATH")]
    errors: Option<PathBuf>,

    /// Follow a batch already submitted instead of submitting the input
    #[arg(long, value_name = "ID")]
    batch_id: Option<String>,

    /// Seconds between progress polls
    #[arg(long, default_value_t = 1.0)]
    poll_interval: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.poll_interval.is_finite() && args.poll_interval > 0.0,
        "--poll-interval must be a positive number of seconds"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(run_async(args))
}

struct Api {
    client: Client,
    base: String,
    key: Option<String>,
}

impl Api {
    fn req(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// The response if it succeeded, else an error with the server's message.
    async fn send(&self, r: RequestBuilder, what: &str) -> anyhow::Result<Response> {
        let resp = r
            .send()
            .await
            .with_context(|| format!("{what}: cannot reach the server"))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        let msg = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_string();
        bail!("{what}: the server answered {status}: {msg}")
    }
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    let api = Api {
        client: Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?,
        base: args.server.trim_end_matches('/').to_string(),
        key: args.api_key.clone(),
    };
    let batch = match (&args.batch_id, &args.input) {
        (Some(id), _) => get_batch(&api, id).await?,
        (None, Some(input)) => submit(&api, input, &args).await?,
        (None, None) => bail!("give an input file or --batch-id"),
    };
    eprintln!("batch {} ({}): {}", batch.id, batch.endpoint, batch.status);
    let batch = follow(&api, batch, Duration::from_secs_f64(args.poll_interval)).await?;
    let stem = args
        .input
        .clone()
        .unwrap_or_else(|| PathBuf::from(&batch.id));
    let counts = batch.request_counts;
    if let Some(id) = &batch.output_file_id {
        let path = args
            .output
            .clone()
            .unwrap_or_else(|| with_suffix(&stem, "output.jsonl"));
        download(&api, id, &path).await?;
        eprintln!(
            "{} answered lines written to {}",
            counts.completed,
            path.display()
        );
    }
    if let Some(id) = &batch.error_file_id {
        let path = args
            .errors
            .clone()
            .unwrap_or_else(|| with_suffix(&stem, "errors.jsonl"));
        download(&api, id, &path).await?;
        eprintln!(
            "{} failed lines written to {}",
            counts.failed,
            path.display()
        );
    }
    match batch.status.as_str() {
        "completed" => Ok(()),
        "failed" => {
            let why: Vec<String> = batch
                .errors
                .iter()
                .flat_map(|e| &e.data)
                .map(|e| e.message.clone())
                .collect();
            bail!("batch {} failed: {}", batch.id, why.join("; "))
        }
        other => bail!("batch {} ended {other}", batch.id),
    }
}

/// Uploads the input (streamed from disk) and creates the batch.
async fn submit(api: &Api, input: &Path, args: &Args) -> anyhow::Result<Batch> {
    let endpoint = match &args.endpoint {
        Some(e) => e.clone(),
        None => first_url(input)?,
    };
    let file = tokio::fs::File::open(input)
        .await
        .with_context(|| format!("cannot open {}", input.display()))?;
    let len = file.metadata().await?.len();
    let name = input
        .file_name()
        .map_or("batch.jsonl".into(), |n| n.to_string_lossy().into_owned());
    let part = Part::stream_with_length(reqwest::Body::from(file), len).file_name(name);
    let form = Form::new().text("purpose", "batch").part("file", part);
    let upload = api.req(reqwest::Method::POST, "/v1/files").multipart(form);
    let uploaded: FileObject = api
        .send(upload, "uploading the input")
        .await?
        .json()
        .await?;
    let create = CreateBatch {
        input_file_id: uploaded.id,
        endpoint,
        completion_window: args.completion_window.clone(),
        metadata: None,
    };
    let r = api.req(reqwest::Method::POST, "/v1/batches").json(&create);
    Ok(api.send(r, "creating the batch").await?.json().await?)
}

/// The `url` of the input's first line.
fn first_url(input: &Path) -> anyhow::Result<String> {
    use std::io::BufRead;
    let f =
        std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
    let first = std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .find(|l| !l.trim().is_empty())
        .context("the input file is empty")?;
    let v: serde_json::Value =
        serde_json::from_str(&first).context("the first line is not JSON")?;
    v["url"]
        .as_str()
        .map(String::from)
        .context("the first line has no `url`; pass --endpoint")
}

async fn get_batch(api: &Api, id: &str) -> anyhow::Result<Batch> {
    let r = api.req(reqwest::Method::GET, &format!("/v1/batches/{id}"));
    Ok(api.send(r, "reading the batch").await?.json().await?)
}

/// Polls until the batch ends, with a bar of lines done.
async fn follow(api: &Api, mut batch: Batch, every: Duration) -> anyhow::Result<Batch> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} {wide_bar:.cyan/blue} {pos}/{len} lines {per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    let ended = ["completed", "failed", "cancelled", "expired"];
    while !ended.contains(&batch.status.as_str()) {
        tokio::time::sleep(every).await;
        batch = get_batch(api, &batch.id).await?;
        let c = batch.request_counts;
        bar.set_length(c.total);
        bar.set_position(c.completed + c.failed);
        bar.set_message(batch.status.clone());
    }
    bar.finish_and_clear();
    Ok(batch)
}

async fn download(api: &Api, id: &str, path: &Path) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let r = api.req(reqwest::Method::GET, &format!("/v1/files/{id}/content"));
    let resp = api.send(r, "downloading results").await?;
    let tmp = with_suffix(path, "part");
    let mut out = tokio::fs::File::create(&tmp)
        .await
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        out.write_all(&chunk.context("downloading results")?)
            .await?;
    }
    out.sync_all().await?;
    tokio::fs::rename(&tmp, path).await?;
    Ok(())
}

/// `path` with `.suffix` appended to its name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}
