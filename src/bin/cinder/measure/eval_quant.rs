//! `cinder eval-quant MODEL --types q8_0,q4_0 --file TEXT`: quantizes the model from an F16 (or
//! F32) baseline to each type, scores every file on the same text, and compares each against the
//! baseline's distributions: size, bits per weight, PPL, ΔPPL %, mean KLD, same top token, and the
//! quality tier its ΔPPL falls in (tiers configurable; over the last one is flagged).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cinder::eval::kld::{BaseLogits, DEFAULT_TOP_K};
use cinder::eval::{Evaluation, PerplexityOptions, evaluate};
use cinder::gguf::GgufFile;
use cinder::prelude::*;
use clap::Args;

/// `cinder eval-quant MODEL --types T,... --file TEXT`
#[derive(Args, Debug)]
pub struct EvalQuantArgs {
    /// Catalog name or GGUF path. Quantized weights are dequantized into the baseline first.
    pub model: String,
    /// Types to evaluate, comma-separated (those `cinder quantize` writes).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "q8_0,q6_k,q5_k,q5_1,q5_0,q4_k,q4_1,q4_0"
    )]
    pub types: Vec<String>,
    /// Text to score (a file, or a catalog data name such as `lee-corpus`).
    #[arg(long)]
    pub file: String,
    /// Baseline type: f16 (default), bf16 or f32.
    #[arg(long, default_value = "f16")]
    pub baseline: String,
    /// Tokens per chunk.
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// At most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Tokens kept per position of the baseline's distributions (KLD over these + the rest).
    #[arg(long, default_value_t = DEFAULT_TOP_K)]
    pub top_k: usize,
    /// ΔPPL budgets in percent, strictest first: safety-critical, production, throughput-first.
    /// A type over the last one is flagged.
    #[arg(long, value_delimiter = ',', default_value = "2,5,8")]
    pub tiers: Vec<f64>,
    /// Also write the table (Markdown) here. If the file holds `<!-- eval-quant:begin -->` and
    /// `<!-- eval-quant:end -->`, only the part between them is replaced.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the quantized files go (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// Runs on backend `B`.
pub struct Task(pub EvalQuantArgs, pub crate::Loader);

const TIER_NAMES: [&str; 3] = ["safety-critical", "production", "throughput-first"];

/// One row of the table.
struct Row {
    ty: String,
    bytes: u64,
    bpw: f64,
    ev: Evaluation,
}

/// File size and bits per weight over all tensors.
fn size_of(path: &Path) -> Result<(u64, f64)> {
    let g = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let (mut bytes, mut elems) = (0u64, 0u64);
    for t in g.tensors() {
        bytes += g.tensor_data(t).len() as u64;
        elems += t.n_elements();
    }
    let file = std::fs::metadata(path)?.len();
    Ok((file, 8.0 * bytes as f64 / elems.max(1) as f64))
}

fn tier(delta_pct: f64, tiers: &[f64]) -> String {
    match tiers.iter().position(|&t| delta_pct <= t) {
        Some(i) => TIER_NAMES.get(i).map_or(format!("≤ {}%", tiers[i]), |n| {
            format!("{n} (≤ {}%)", tiers[i])
        }),
        None => format!(
            "**over budget** (> {}%)",
            tiers.last().copied().unwrap_or(0.0)
        ),
    }
}

impl BackendTask for Task {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        if a.types.is_empty() {
            bail!("--types: name at least one type");
        }
        if a.tiers.is_empty() || a.tiers.windows(2).any(|w| w[0] > w[1]) {
            bail!("--tiers: ΔPPL budgets in percent, strictest first (e.g. 2,5,8)");
        }
        // Every type is checked before the (long) baseline run.
        crate::quantize::target(&a.baseline).context("--baseline")?;
        for ty in &a.types {
            crate::quantize::target(ty).context("--types")?;
        }
        let src = crate::resolve_model(&a.model)?;
        let text = super::perplexity::read_text(&a.file)?;
        let (dir, temporary) = match &a.work_dir {
            Some(d) => (d.clone(), false),
            None => (
                std::env::temp_dir().join(format!("cinder-eval-quant-{}", std::process::id())),
                true,
            ),
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let result = run_all::<B>(&a, &self.1, &src, &text, &dir, &device);
        if temporary {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let (rows, base_ppl) = result?;
        let table = render(&a, &src, &rows, base_ppl);
        println!("{table}");
        if let Some(out) = &a.out {
            write_table(out, &table)?;
            eprintln!("table written to {}", out.display());
        }
        Ok(())
    }
}

fn run_all<B: InferenceBackend>(
    a: &EvalQuantArgs,
    loader: &crate::Loader,
    src: &Path,
    text: &str,
    dir: &Path,
    device: &B::Device,
) -> Result<(Vec<Row>, f64)> {
    let stem = src
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let base_path = dir.join(format!("{stem}.{}.gguf", a.baseline));
    eprintln!("baseline: {} -> {}", src.display(), base_path.display());
    crate::quantize::convert(src, &base_path, &a.baseline, true)?;
    let score = |path: &Path, save: bool, base: Option<&BaseLogits>| -> Result<Evaluation> {
        let m = loader.load::<B>(&path.to_string_lossy(), device)?;
        let tokens = m.tokenizer.encode(text, true)?;
        let bos = if m.tokenizer.add_bos {
            m.tokenizer.bos_id
        } else {
            None
        };
        let opts = PerplexityOptions {
            ctx: a.ctx,
            max_chunks: a.chunks,
            bos,
            paged: false,
            kv_type: Default::default(),
        };
        let name = path.file_name().map(|f| f.to_string_lossy().into_owned());
        let ev = evaluate(
            &m.model,
            &tokens,
            opts,
            save.then_some(a.top_k),
            base,
            &mut |i, n, p| {
                eprint!(
                    "\r{}: chunk {i}/{n}, PPL {p:.4}   ",
                    name.as_deref().unwrap_or("")
                )
            },
        )?;
        eprintln!();
        Ok(ev)
    };
    let base_ev = score(&base_path, true, None)?;
    let base = base_ev
        .saved
        .clone()
        .context("the baseline's distributions were not kept")?;
    let base_ppl = base_ev.perplexity.ppl;
    let (bytes, bpw) = size_of(&base_path)?;
    let mut rows = vec![Row {
        ty: format!("{} (baseline)", a.baseline),
        bytes,
        bpw,
        ev: base_ev,
    }];
    for ty in &a.types {
        let path = dir.join(format!("{stem}.{ty}.gguf"));
        let c = crate::quantize::convert(&base_path, &path, ty, false)
            .with_context(|| format!("quantizing to {ty}"))?;
        let ev = score(&path, false, Some(&base))?;
        let (bytes, bpw) = size_of(&path)?;
        let _ = std::fs::remove_file(&path);
        // Say when llama-quantize's fallback replaced a K-quant for some matrices: the row is a mix.
        let label = match c.fell_back {
            0 => ty.clone(),
            n => format!(
                "{ty} ({n} of {} matrices at the fallback type)",
                c.converted
            ),
        };
        rows.push(Row {
            ty: label,
            bytes,
            bpw,
            ev,
        });
    }
    Ok((rows, base_ppl))
}

fn render(a: &EvalQuantArgs, src: &Path, rows: &[Row], base_ppl: f64) -> String {
    let mut t = String::new();
    let first = &rows[0].ev.perplexity;
    let _ = writeln!(
        t,
        "`cinder eval-quant {} --types {} --file {} --ctx {}{}` — source {}, baseline {} \
         (every weight matrix dequantized, then quantized from it; norms kept in f32), \
         {} chunks × {} tokens, {} positions scored; KLD over the baseline's top-{} tokens + \
         the rest as one bucket. Tiers: ΔPPL ≤ {}.\n",
        a.model,
        a.types.join(","),
        a.file,
        a.ctx,
        a.chunks.map_or(String::new(), |c| format!(" --chunks {c}")),
        src.file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned()),
        a.baseline,
        first.chunks,
        a.ctx,
        first.tokens,
        a.top_k,
        a.tiers
            .iter()
            .zip(TIER_NAMES.iter().chain(std::iter::repeat(&"")))
            .map(|(v, n)| format!("{v}% {n}").trim_end().to_string())
            .collect::<Vec<_>>()
            .join(" / "),
    );
    let _ = writeln!(
        t,
        "| type | size MiB | bits/weight | PPL | ΔPPL % | mean KLD | same top % | tier |\n|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let p = &r.ev.perplexity;
        let mib = r.bytes as f64 / (1024.0 * 1024.0);
        match &r.ev.kld {
            None => {
                let _ = writeln!(
                    t,
                    "| {} | {mib:.1} | {:.2} | {:.4} ± {:.4} | — | — | — | — |",
                    r.ty, r.bpw, p.ppl, p.stderr
                );
            }
            Some(k) => {
                let d = 100.0 * (p.ppl / base_ppl - 1.0);
                let _ = writeln!(
                    t,
                    "| {} | {mib:.1} | {:.2} | {:.4} ± {:.4} | {d:+.2} | {:.5} ± {:.5} | {:.2} ± {:.2} | {} |",
                    r.ty,
                    r.bpw,
                    p.ppl,
                    p.stderr,
                    k.kld.0,
                    k.kld.1,
                    k.same_top_pct.0,
                    k.same_top_pct.1,
                    tier(d, &a.tiers)
                );
            }
        }
    }
    t
}

/// Writes `table` to `out`, between the eval-quant markers when the file has them.
fn write_table(out: &Path, table: &str) -> Result<()> {
    const BEGIN: &str = "<!-- eval-quant:begin -->";
    const END: &str = "<!-- eval-quant:end -->";
    let text = match std::fs::read_to_string(out) {
        Ok(old) => match (old.find(BEGIN), old.find(END)) {
            (Some(b), Some(e)) if b < e => {
                format!("{}{BEGIN}\n{table}{}", &old[..b], &old[e..])
            }
            _ => table.to_string(),
        },
        Err(_) => table.to_string(),
    };
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
