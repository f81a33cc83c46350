//! `cinder quantize IN OUT --type T`: rewrites a GGUF file with its weight matrices in another block
//! format, with ggml's reference quantizers (`cinder_gguf::quantize`).
//!
//! Quantized: 2-D (and larger) tensors named `*.weight` whose rows are whole blocks of the target type.
//! A K-quant target whose 256-value super-blocks do not divide a tensor's rows falls back per tensor
//! as `llama-quantize` does (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0); SmolLM2's 576-wide rows are such.
//! Kept as they are: norms, biases and other 1-D tensors, and tensors already of the target type.
//! An already-quantized source tensor is requantized (through f32) only with `--allow-requantize`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cinder::gguf::writer::GgufWriter;
use cinder::gguf::{GgmlType, GgufFile, Value, quantize};
use clap::Args;

/// `cinder quantize IN OUT --type T`
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Catalog name or path of the source GGUF file.
    pub input: String,
    /// Output GGUF path (written to a temporary file, then renamed).
    pub output: PathBuf,
    /// Target type: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k.
    #[arg(long = "type")]
    pub ty: String,
    /// Allow quantizing tensors that are already quantized (through f32; quality compounds).
    #[arg(long)]
    pub allow_requantize: bool,
}

/// The block type named `name` and llama.cpp's `general.file_type` for a file mostly of it.
pub fn target(name: &str) -> Result<(GgmlType, u32)> {
    // (type, llama.cpp's general.file_type for a file "mostly" of it)
    Ok(match name.to_ascii_lowercase().as_str() {
        "f16" => (GgmlType::F16, 1),
        "bf16" => (GgmlType::BF16, 32),
        "q8_0" => (GgmlType::Q8_0, 7),
        "q4_0" => (GgmlType::Q4_0, 2),
        "q4_1" => (GgmlType::Q4_1, 3),
        "q5_0" => (GgmlType::Q5_0, 8),
        "q5_1" => (GgmlType::Q5_1, 9),
        // llama.cpp's "mostly Q4_K/Q5_K (S)" and "mostly Q6_K": the S mixes are the uniform ones.
        "q4_k" => (GgmlType::Q4_K, 14),
        "q5_k" => (GgmlType::Q5_K, 16),
        "q6_k" => (GgmlType::Q6_K, 18),
        "q2_k" | "q3_k" => bail!(
            "--type {name}: the Q2_K/Q3_K quantizers are not implemented (available: {AVAILABLE})"
        ),
        _ => bail!("unknown --type {name:?} (available: {AVAILABLE})"),
    })
}

const AVAILABLE: &str = "f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k";

/// The type a tensor with rows of `row` values gets when `ty`'s blocks do not divide them:
/// llama-quantize's per-tensor fallback for K-quants, `None` when there is none (kept as is).
fn fallback(ty: GgmlType, row: u64) -> Option<GgmlType> {
    let alt = match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => return None,
    };
    row.is_multiple_of(alt.block_size()).then_some(alt)
}

fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Runs the command.
pub fn run(a: &QuantizeArgs) -> Result<()> {
    let path = crate::resolve_model(&a.input)?;
    let c = convert(&path, &a.output, &a.ty, a.allow_requantize)?;
    let fell_back = match c.fell_back {
        0 => String::new(),
        n => format!(" ({n} of them to the fallback type: rows not whole super-blocks)"),
    };
    println!(
        "{} -> {}: {} tensors to {}{fell_back}, {} kept",
        path.display(),
        a.output.display(),
        c.converted,
        c.ty.name(),
        c.kept
    );
    Ok(())
}

/// What [`convert`] did.
pub struct Converted {
    /// the target type
    pub ty: GgmlType,
    /// tensors converted to it (or to its fallback)
    pub converted: usize,
    /// of those, tensors that got the fallback type because the blocks do not divide their rows
    pub fell_back: usize,
    /// tensors kept as they were
    pub kept: usize,
}

/// Writes `output`: `path`'s GGUF with its weight matrices in type `ty_name`.
pub fn convert(
    path: &std::path::Path,
    output: &std::path::Path,
    ty_name: &str,
    allow_requantize: bool,
) -> Result<Converted> {
    let (ty, file_type) = target(ty_name)?;
    let src = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut w = GgufWriter::new();
    for key in src.keys() {
        let Some(v) = src.get(key) else { continue };
        let v = if key == "general.file_type" {
            Value::U32(file_type)
        } else {
            v.clone()
        };
        w.add_kv(key.clone(), v)?;
    }
    if src.get("general.file_type").is_none() {
        w.add_kv("general.file_type", Value::U32(file_type))?;
    }
    let (mut converted, mut kept, mut fell_back) = (0usize, 0usize, 0usize);
    for info in src.tensors() {
        let row = info.dims.first().copied().unwrap_or(0);
        let matrix = info.dims.len() >= 2 && info.name.ends_with(".weight") && row > 0;
        let this_ty = if row.is_multiple_of(ty.block_size()) {
            ty
        } else {
            fallback(ty, row).unwrap_or(ty)
        };
        let eligible =
            matrix && row.is_multiple_of(this_ty.block_size()) && info.ggml_type != this_ty;
        if !eligible {
            w.add_tensor(
                info.name.clone(),
                &info.dims,
                info.ggml_type,
                src.tensor_data(info).to_vec(),
            )?;
            kept += 1;
            continue;
        }
        if !is_float(info.ggml_type) && !allow_requantize {
            bail!(
                "tensor {} is already {}: pass --allow-requantize to requantize it to {} through f32",
                info.name,
                info.ggml_type.name(),
                this_ty.name()
            );
        }
        if this_ty != ty {
            tracing::info!(
                tensor = %info.name,
                row,
                "{} blocks do not divide the rows: {} instead, as llama-quantize",
                ty.name(),
                this_ty.name()
            );
            fell_back += 1;
        }
        let values = src.dequantize(info)?;
        let data = quantize::quantize(this_ty, &values, row as usize)
            .with_context(|| format!("tensor {}", info.name))?;
        w.add_tensor(info.name.clone(), &info.dims, this_ty, data)?;
        converted += 1;
    }
    let tmp = output.with_extension("gguf.partial");
    {
        let f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut f = std::io::BufWriter::new(f);
        w.write_to(&mut f)?;
        f.flush()?;
    }
    std::fs::rename(&tmp, output)?;
    Ok(Converted {
        ty,
        converted,
        fell_back,
        kept,
    })
}
