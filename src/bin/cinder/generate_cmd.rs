//! `cinder run` and `cinder chat`.

use std::io::{BufRead, Write};

use anyhow::{Context, Result};
use cinder::prelude::*;
use cinder::runtime::constraint::{Constraint, Grammars};
use cinder::runtime::generate::Session;
use cinder::runtime::tokenizer::{ChatMessage, Tokenizer, apply_chat_template};
use clap::Args;

/// Sampling and length flags shared by `run` and `chat`.
#[derive(Args, Debug, Clone)]
pub struct GenFlags {
    /// Most new tokens.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Drop tokens below min-p × the top probability (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// RNG seed (same seed, same output).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when this string appears (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Context size to allocate.
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// The output must be JSON valid under the JSON schema in this file.
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub json_schema: Option<std::path::PathBuf>,
    /// The output must follow the Lark grammar in this file (`start` is the top rule).
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub grammar: Option<std::path::PathBuf>,
    /// The output must match this regular expression (Rust regex syntax), whole.
    #[arg(long, value_name = "R", group = "constraint")]
    pub regex: Option<String>,
    /// K/V cache storage: f16, or q8_0 / q4_0 blocks (0.53× / 0.28× the memory; CPU backends).
    #[arg(long, default_value = "f16", value_parser = crate::engine_flags::parse_kv_type)]
    pub kv_type: cinder::runtime::kv::KvType,
    #[command(flatten)]
    pub spec: crate::engine_flags::SpecFlags,
}

impl GenFlags {
    /// The constraint the flags ask for, if any.
    pub fn constraint(&self) -> Result<Option<Constraint>> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        Ok(if let Some(p) = &self.json_schema {
            let v = serde_json::from_str(&read(p)?)
                .with_context(|| format!("{} is not JSON", p.display()))?;
            Some(Constraint::JsonSchema(v))
        } else if let Some(p) = &self.grammar {
            Some(Constraint::Lark(read(p)?))
        } else {
            self.regex.clone().map(Constraint::Regex)
        })
    }

    fn options(&self, tok: &Tokenizer) -> Result<GenerateOptions> {
        let constraint = match self.constraint()? {
            Some(c) => Some(Grammars::new(tok, tok.vocab_size)?.compile(&c)?),
            None => None,
        };
        Ok(GenerateOptions {
            max_tokens: self.max_tokens,
            sampling: SamplingParams {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                repeat_last_n: 64,
                seed: self.seed,
            },
            stop_strings: self.stop.clone(),
            stop_on_eos: !self.ignore_eos,
            context: self.ctx,
            speculative: self.spec.config()?,
            constraint,
            kv_type: self.kv_type,
        })
    }
}

/// `cinder run`
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// The prompt, used verbatim (no chat template; BOS added if the model asks for it).
    #[arg(long)]
    pub prompt: String,
    #[command(flatten)]
    pub sampling: GenFlags,
}

/// `cinder chat`
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// A system message.
    #[arg(long)]
    pub system: Option<String>,
    /// Answer this one user message and exit (otherwise read turns from stdin).
    #[arg(long)]
    pub prompt: Option<String>,
    #[command(flatten)]
    pub sampling: GenFlags,
}

fn stream_to_stdout(piece: &str) -> bool {
    let mut out = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) ends generation instead of panicking.
    out.write_all(piece.as_bytes()).is_ok() && out.flush().is_ok()
}

/// Runs `cinder run` on backend `B`.
pub struct RunTask(pub RunArgs, pub crate::Loader);

impl BackendTask for RunTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let (a, loader) = (self.0, self.1);
        let m = loader.load::<B>(&a.model, &device)?;
        let draft = a.sampling.spec.load_draft(&loader, &m, &device)?;
        let ids = m.tokenizer.encode(&a.prompt, true)?;
        let out = generate_with_draft(
            &m.model,
            draft
                .as_ref()
                .map(|d| &d.model as &(dyn CausalLm<B> + Sync)),
            &m.tokenizer,
            &ids,
            &a.sampling.options(&m.tokenizer)?,
            &mut stream_to_stdout,
        )?;
        println!();
        report(&out);
        Ok(())
    }
}

fn report(out: &Generation) {
    let decode: f64 = out.decode_times.iter().map(|d| d.as_secs_f64()).sum();
    let tps = if decode > 0.0 {
        out.decode_times.len() as f64 / decode
    } else {
        0.0
    };
    tracing::info!(
        prompt_tokens = out.prompt_tokens,
        cached_tokens = out.cached_tokens,
        generated = out.tokens.len(),
        finish = ?out.finish,
        prefill_ms = out.prefill_time.as_millis() as u64,
        decode_tps = format!("{tps:.1}"),
        "generation done"
    );
}

/// Runs `cinder chat` on backend `B`.
pub struct ChatTask(pub ChatArgs, pub crate::Loader);

impl BackendTask for ChatTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let (a, loader) = (self.0, self.1);
        let m = loader.load::<B>(&a.model, &device)?;
        let draft = a.sampling.spec.load_draft(&loader, &m, &device)?;
        let draft = draft
            .as_ref()
            .map(|d| &d.model as &(dyn CausalLm<B> + Sync));
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(ChatMessage::new("system", s.clone()));
        }
        let opts = a.sampling.options(&m.tokenizer)?;
        // One engine core for the conversation, its KV pool the whole context: each turn finds
        // the earlier turns' KV in the prefix cache and prefills only what is new.
        let mut session = Session::with_kv_type(
            &m.model,
            draft,
            &m.tokenizer,
            opts.context,
            opts.speculative,
            true,
            opts.kv_type,
        )?;
        let mut turn = |messages: &mut Vec<ChatMessage>, user: String| -> Result<()> {
            messages.push(ChatMessage::new("user", user));
            let text = apply_chat_template(&m.tokenizer, messages, true)?;
            // The template writes BOS itself where the model wants one, and its control tokens
            // (`<|im_start|>`, `<start_of_turn>`) must be parsed as such, not as text.
            let ids = m.tokenizer.tokenize(&text, false, true)?;
            let out = session.generate(&ids, &opts, &mut stream_to_stdout)?;
            println!();
            report(&out);
            messages.push(ChatMessage::new("assistant", out.text.trim().to_string()));
            Ok(())
        };
        if let Some(p) = a.prompt {
            return turn(&mut messages, p);
        }
        let stdin = std::io::stdin();
        eprint!("> ");
        for line in stdin.lock().lines() {
            let line = line?;
            if line.trim().is_empty() {
                eprint!("> ");
                continue;
            }
            turn(&mut messages, line)?;
            eprint!("> ");
        }
        Ok(())
    }
}
