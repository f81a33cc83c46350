//! `cinder quantize IN OUT --type T`: rewrites a GGUF file with its weight matrices in another block
//! format, with ggml's reference quantizers (`cinder_gguf::quantize`).
//!
//! Quantized: 2-D (and larger) tensors named `*.weight` whose rows are whole blocks of the target type.
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
    /// Target type: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1.
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
        "q4_k" | "q5_k" | "q6_k" => bail!(
            "--type {name}: the K-quant reference quantizers are not implemented yet \
             (available: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)"
        ),
        _ => bail!("unknown --type {name:?} (available: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)"),
    })
}

fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Runs the command.
pub fn run(a: &QuantizeArgs) -> Result<()> {
    let path = crate::resolve_model(&a.input)?;
    let c = convert(&path, &a.output, &a.ty, a.allow_requantize)?;
    println!(
        "{} -> {}: {} tensors to {}, {} kept",
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
    /// tensors converted to it
    pub converted: usize,
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
    let (mut converted, mut kept) = (0usize, 0usize);
    for info in src.tensors() {
        let row = info.dims.first().copied().unwrap_or(0);
        let eligible = info.dims.len() >= 2
            && info.name.ends_with(".weight")
            && row.is_multiple_of(ty.block_size())
            && info.ggml_type != ty;
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
                ty.name()
            );
        }
        let values = src.dequantize(info)?;
        let data = quantize::quantize(ty, &values, row as usize)
            .with_context(|| format!("tensor {}", info.name))?;
        w.add_tensor(info.name.clone(), &info.dims, ty, data)?;
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
        kept,
    })
}
