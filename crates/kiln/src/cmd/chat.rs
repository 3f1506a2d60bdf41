//! `kiln chat`: an interactive chat using the model's chat template.

use std::io::{BufRead, Write};

use kiln_engine::output::TextEvent;
use kiln_engine::sample::SamplingParams;
use kiln_engine::{GenerateRequest, ServingOptions, StopConditions};

use super::GlobalArgs;
use crate::chat_prompt;

/// Arguments of `kiln chat`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Catalogue model name or alias
    #[arg(long, short, default_value = kiln_catalog::DEFAULT_MODEL, env = "KILN_MODEL")]
    model: String,

    /// A system prompt (otherwise the template's default, if any)
    #[arg(long)]
    system: Option<String>,

    /// Most tokens per answer
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,

    /// Sampling temperature (0 = greedy)
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,

    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
}

/// Runs `kiln chat` until end of input or `/exit`.
pub fn run(global: &GlobalArgs, args: Args) -> anyhow::Result<()> {
    let mut opts = ServingOptions::detect();
    opts.max_num_seqs = 1;
    opts.load.pack_cache = global.pack_cache()?;
    let model = crate::load::text_model(global, &args.model, &opts)?;
    if model.chat_template.is_none() {
        model.shutdown();
        anyhow::bail!(
            "{} has no chat template; use `kiln run --raw` for plain completion",
            args.model
        );
    }
    let result = chat_loop(&model, &args);
    model.shutdown();
    result
}

fn chat_loop(model: &kiln_engine::ServingModel, args: &Args) -> anyhow::Result<()> {
    let mut history = Vec::new();
    if let Some(s) = &args.system {
        history.push(chat_prompt::system(s));
    }
    eprintln!(
        "Chatting with {} — /reset clears the conversation, /exit (or Ctrl-D) quits.",
        model.name
    );
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.retain(|m: &chat_prompt::Message| m.role == "system");
                continue;
            }
            _ => {}
        }
        history.push(chat_prompt::user(line));
        let prompt = chat_prompt::render(model, &history)?;
        let tokens = model.tokenizer.encode(&prompt, true, true)?;
        let room = model
            .engine_config
            .max_model_len
            .saturating_sub(tokens.len());
        if room == 0 {
            eprintln!("(the conversation no longer fits the context; /reset to start over)");
            history.pop();
            continue;
        }
        let req = GenerateRequest {
            prompt: tokens,
            sampling: SamplingParams {
                temperature: args.temperature,
                top_p: args.top_p,
                ..SamplingParams::default()
            },
            stop: StopConditions {
                max_tokens: args.max_tokens.min(room),
                ..StopConditions::default()
            },
            n: 1,
            priority: 0,
            cache_key: Vec::new(),
            adapter: None,
            constraint: None,
            speculative: true,
        };
        let mut stream = model.generate(req, true)?;
        let mut answer = String::new();
        while let Some(ev) = stream.blocking_next() {
            if let TextEvent::Delta { text, .. } = ev {
                out.write_all(text.as_bytes())?;
                out.flush()?;
                answer.push_str(&text);
            }
        }
        writeln!(out)?;
        history.push(chat_prompt::assistant(answer.trim()));
    }
    Ok(())
}
