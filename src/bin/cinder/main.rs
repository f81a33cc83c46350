//! The `cinder` command line. Results go to stdout; logs and progress go to stderr.

mod embed_cmd;
mod engine_flags;
mod generate_cmd;
mod import_cmd;
mod index_cmd;
mod info;
mod measure;
mod quantize;
mod serve;

use measure::{bench, embed as bench_embed, eval_quant, perplexity};

use std::path::PathBuf;

use anyhow::{Context, Result};
use cinder::backends::{self, BackendKind};
use cinder::importer::Offload;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cinder",
    version,
    about = "LLM and embedding inference on Burn"
)]
struct Cli {
    /// Backend to run on (those compiled in, or `auto`: CUDA, then a hardware wgpu adapter, then the
    /// CPU); default: the first compiled CPU backend.
    #[arg(long, global = true)]
    backend: Option<String>,
    /// CPU threads for CPU backends (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Layer offload: run the first N transformer layers on an accelerator backend (wgpu, cuda) and
    /// the rest, with the embedding and head, on a CPU backend. `--backend` may name either side;
    /// the other is the first compiled in. More than the model has offloads every layer.
    #[arg(long, global = true, value_name = "N")]
    gpu_layers: Option<usize>,
    /// Log more (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text from a prompt; streams only the generated text to stdout.
    Run(generate_cmd::RunArgs),
    /// Chat with the model using its chat template (interactive, or one turn with --prompt).
    Chat(generate_cmd::ChatArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (and gRPC).
    Serve(serve::ServeArgs),
    /// Turn texts into sentence embeddings.
    Embed(embed_cmd::EmbedArgs),
    /// Create, fill and search vector indexes.
    Index(index_cmd::IndexArgs),
    /// Download a catalog model into the cache (or list the catalog).
    Pull(PullArgs),
    /// Show architecture, sizes, tensor types, tokenizer and checksum of a model.
    Info(info::InfoArgs),
    /// Import a GGUF file or an HF SafeTensors checkpoint into a verified record directory.
    Import(import_cmd::ImportArgs),
    /// Rewrite a GGUF file with its weights in another block format (ggml's reference quantizers).
    Quantize(quantize::QuantizeArgs),
    // The measuring commands (`measure/`).
    /// Measure prompt-processing and generation speed.
    Bench(bench::BenchArgs),
    /// Score a text file the way llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Quantize a model to several types from an F16 baseline and compare their quality (PPL, KLD)
    #[command(name = "eval-quant")]
    EvalQuant(eval_quant::EvalQuantArgs),
    /// Measure sentence-embedding throughput (sentences/s) per batch size.
    #[command(name = "bench-embed")]
    BenchEmbed(bench_embed::BenchEmbedArgs),
    /// Measure HNSW against exact search on random unit vectors (build, latency, recall).
    #[command(name = "bench-index")]
    BenchIndex(bench_embed::BenchIndexArgs),
}

#[derive(Args, Debug)]
struct PullArgs {
    /// Catalog name (see --list).
    name: Option<String>,
    /// Re-download even if a verified copy is cached.
    #[arg(long)]
    force: bool,
    /// List catalog entries.
    #[arg(long)]
    list: bool,
}

/// Resolves a MODEL argument (catalog name or path) to a file path, pulling if needed.
pub fn resolve_model(model: &str) -> Result<PathBuf> {
    let r =
        cinder::catalog::resolve(model).with_context(|| format!("resolving model {model:?}"))?;
    Ok(r.path)
}

/// How this run loads language models: whole, or split with an accelerator (`--gpu-layers`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Loader {
    /// the accelerator and the layers it runs
    pub offload: Option<Offload>,
}

impl Loader {
    /// Resolves MODEL and loads it (GGUF file, record directory or HF checkpoint) on `device`,
    /// split with the accelerator when `--gpu-layers` asks for it.
    pub fn load<B: cinder::backends::InferenceBackend>(
        &self,
        model: &str,
        device: &B::Device,
    ) -> Result<cinder::importer::LoadedModel<B>> {
        let path = resolve_model(model)?;
        let loaded = match self.offload {
            Some(o) => cinder::importer::load_model_offloaded::<B>(&path, device, o),
            None => cinder::importer::load_model::<B>(&path, device),
        };
        loaded.with_context(|| format!("loading {}", path.display()))
    }
}

/// Splits `--backend` and `--gpu-layers N` into the backend to run on (the CPU side) and, when
/// N > 0, the accelerator for the first N layers.
fn pick_offload(
    backend: Option<&str>,
    gpu_layers: Option<usize>,
) -> Result<(Option<String>, Option<Offload>)> {
    let n = match gpu_layers {
        None | Some(0) => return Ok((backend.map(str::to_string), None)),
        Some(n) => n,
    };
    let named = match backend {
        Some(b) => b.parse::<BackendKind>()?,
        None => BackendKind::Auto,
    };
    // The library names its builder setter; the command line, its flag.
    let (cpu, offload) = cinder::llm::offload_plan(named, n).map_err(|e| match e {
        cinder::Error::InvalidOption(m) => anyhow::anyhow!(m.replace("gpu_layers", "--gpu-layers")),
        e => e.into(),
    })?;
    Ok((Some(cpu.name().to_string()), offload))
}

/// Logs to stderr at `verbose`'s level (`RUST_LOG` overrides); with `count_launches`, also counts
/// CubeCL kernel launches (`cinder bench`: each layer keeps its own filter, so the counter sees
/// the launch spans whatever the log level).
fn init_logging(verbose: u8, count_launches: bool) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let counter = (count_launches && backends::counters::counts_launches()).then(|| {
        backends::counters::LaunchCounter.with_filter(
            tracing_subscriber::filter::Targets::new().with_target(
                backends::counters::LaunchCounter::TARGET,
                tracing::Level::TRACE,
            ),
        )
    });
    tracing_subscriber::registry()
        .with(fmt)
        .with(counter)
        .init();
}

fn pick_backend(backend: Option<&str>, threads: Option<usize>) -> Result<BackendKind> {
    let kind = match backend {
        Some(name) => {
            let k = name.parse::<BackendKind>()?.resolve()?;
            if !k.is_compiled() {
                // dispatch would say the same; say it before loading anything
                anyhow::bail!(backends::BackendError::not_compiled(k));
            }
            k
        }
        None => backends::default_kind()?,
    };
    if let Some(t) = threads {
        if kind.is_cpu() {
            backends::set_threads(t)?;
        } else {
            tracing::warn!("--threads has no effect on the {kind} backend");
        }
    }
    Ok(kind)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_logging(cli.verbose, matches!(cli.cmd, Command::Bench(_)));
    match &cli.cmd {
        Command::Pull(p) => pull(p),
        Command::Info(a) => info::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::BenchIndex(a) => bench_embed::bench_index(a),
        Command::Index(_) => {
            let Command::Index(a) = cli.cmd else {
                unreachable!()
            };
            match index_cmd::run_local(a)? {
                Some(task) => {
                    backends::dispatch(pick_backend(cli.backend.as_deref(), cli.threads)?, task)?
                }
                None => Ok(()),
            }
        }
        _ => {
            let (backend, offload) = pick_offload(cli.backend.as_deref(), cli.gpu_layers)?;
            if let Some(Offload { accel, layers: n }) = offload {
                if !matches!(
                    cli.cmd,
                    Command::Run(_)
                        | Command::Chat(_)
                        | Command::Perplexity(_)
                        | Command::EvalQuant(_)
                        | Command::Serve(_)
                        | Command::Bench(_)
                ) {
                    anyhow::bail!(
                        "--gpu-layers applies to language models only (run, chat, perplexity, eval-quant, serve, bench)"
                    );
                }
                if !accel.is_compiled() {
                    anyhow::bail!(backends::BackendError::not_compiled(accel));
                }
                tracing::info!(accelerator = %accel, layers = n, "layer offload");
            }
            let kind = pick_backend(backend.as_deref(), cli.threads)?;
            tracing::info!(backend = %kind, "backend selected");
            let threads = cli.threads;
            let loader = Loader { offload };
            match cli.cmd {
                Command::Run(a) => backends::dispatch(kind, generate_cmd::RunTask(a, loader))?,
                Command::Chat(a) => backends::dispatch(kind, generate_cmd::ChatTask(a, loader))?,
                Command::Perplexity(a) => backends::dispatch(kind, perplexity::Task(a, loader))?,
                Command::EvalQuant(a) => backends::dispatch(kind, eval_quant::Task(a, loader))?,
                Command::Serve(a) => backends::dispatch(kind, serve::ServeTask(a, loader))?,
                Command::Bench(a) => backends::dispatch(
                    kind,
                    bench::Task {
                        args: a,
                        kind,
                        threads,
                        loader,
                    },
                )?,
                Command::Embed(a) => backends::dispatch(kind, embed_cmd::EmbedTask(a))?,
                Command::Import(a) => backends::dispatch(kind, import_cmd::ImportTask(a))?,
                Command::BenchEmbed(a) => backends::dispatch(kind, bench_embed::BenchEmbedTask(a))?,
                Command::Pull(_)
                | Command::Info(_)
                | Command::Quantize(_)
                | Command::Index(_)
                | Command::BenchIndex(_) => {
                    unreachable!("handled above")
                }
            }
        }
    }
}

fn pull(p: &PullArgs) -> Result<()> {
    if p.list || p.name.is_none() {
        for e in cinder::catalog::entries() {
            println!("{:<32} {:<22} {}", e.name, e.kind.as_str(), e.description);
        }
        return Ok(());
    }
    let name = p.name.as_deref().unwrap_or_default();
    let pulled = cinder::catalog::pull(name, cinder::catalog::PullOptions { force: p.force })?;
    for f in &pulled.files {
        println!("{}  {}", f.sha256, f.path.display());
    }
    Ok(())
}
