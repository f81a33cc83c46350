//! Engine settings shared by the commands that run the continuous-batching engine.

use anyhow::{Context, Result, bail};
use cinder::backends::InferenceBackend;
use cinder::importer::LoadedModel;
use cinder::runtime::engine::{EngineConfig, SpeculativeConfig, check_draft_tokenizer};
use cinder::runtime::kv::{KvBudget, KvType};
use cinder::runtime::scheduler::SchedulerConfig;
use clap::Args;

/// `--kv-memory`, `--max-kv-tokens`, `--max-seqs`, ...
#[derive(Args, Debug, Clone)]
pub struct EngineFlags {
    /// KV cache memory, allocated once (e.g. 512MiB, 2GiB, 300MB); default: from the model and the
    /// free memory.
    #[arg(long, conflicts_with = "max_kv_tokens")]
    pub kv_memory: Option<String>,
    /// KV cache size in tokens (all sequences together), instead of --kv-memory.
    #[arg(long)]
    pub max_kv_tokens: Option<usize>,
    /// Most sequences decoding at once.
    #[arg(long, default_value_t = 16)]
    pub max_seqs: usize,
    /// Most tokens in one forward (decode tokens + prefill chunks).
    #[arg(long, default_value_t = 512)]
    pub max_batched_tokens: usize,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Requests that may wait for admission; more are refused (queue full).
    #[arg(long, default_value_t = 64)]
    pub max_waiting: usize,
    /// Do not reuse KV blocks of identical prompt prefixes.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// K/V cache storage: f16, or q8_0 / q4_0 blocks (0.53× / 0.28× the memory; CPU backends).
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    pub kv_type: KvType,
    #[command(flatten)]
    pub spec: SpecFlags,
}

/// `--kv-type` as clap reads it: the error names the types there are.
pub fn parse_kv_type(s: &str) -> std::result::Result<KvType, String> {
    s.parse::<KvType>().map_err(|e| e.to_string())
}

/// `--speculative`, `--draft-tokens`
#[derive(Args, Debug, Clone)]
pub struct SpecFlags {
    /// Speculative decoding: `ngram` (prompt lookup: drafts copied from earlier in the prompt and
    /// output), `draft:MODEL` (a smaller model with the same tokenizer proposes them; catalog name
    /// or path), or `none`. Drafts are verified in one batched forward: same output, fewer
    /// forwards when they are right.
    #[arg(long, default_value = "none")]
    pub speculative: String,
    /// Most drafted tokens verified per step (see `SpeculativeConfig`'s defaults for why 4).
    #[arg(long, default_value_t = 4)]
    pub draft_tokens: usize,
}

impl SpecFlags {
    /// The speculative-decoding settings, if on.
    pub fn config(&self) -> Result<Option<SpeculativeConfig>> {
        match self.speculative.as_str() {
            "none" | "off" => Ok(None),
            s if s == "ngram" || s.starts_with("draft:") => {
                if s == "draft:" {
                    bail!("--speculative draft:MODEL: name the draft model (catalog name or path)");
                }
                if self.draft_tokens == 0 || self.draft_tokens > 64 {
                    bail!("--draft-tokens must be 1..=64");
                }
                Ok(Some(SpeculativeConfig {
                    draft_tokens: self.draft_tokens,
                    ..SpeculativeConfig::default()
                }))
            }
            s => bail!("--speculative {s:?}: expected ngram, draft:MODEL or none"),
        }
    }

    /// The MODEL of `--speculative draft:MODEL`, if that is the mode.
    pub fn draft_name(&self) -> Option<&str> {
        self.speculative.strip_prefix("draft:")
    }

    /// The draft model named by `--speculative draft:MODEL`, loaded on `device` and checked
    /// against the target's tokenizer; `None` for the other modes.
    pub fn load_draft<B: InferenceBackend>(
        &self,
        loader: &crate::Loader,
        target: &LoadedModel<B>,
        device: &B::Device,
    ) -> Result<Option<LoadedModel<B>>> {
        let Some(name) = self.draft_name() else {
            return Ok(None);
        };
        if name.is_empty() {
            bail!("--speculative draft:MODEL: name the draft model (catalog name or path)");
        }
        let d = loader
            .load::<B>(name, device)
            .with_context(|| format!("--speculative draft:{name}"))?;
        check_draft_tokenizer(&target.tokenizer, &d.tokenizer)
            .with_context(|| format!("--speculative draft:{name}"))?;
        Ok(Some(d))
    }
}

impl EngineFlags {
    /// The engine configuration these flags describe.
    pub fn config(&self) -> Result<EngineConfig> {
        let kv_budget = match (&self.kv_memory, self.max_kv_tokens) {
            (Some(m), _) => Some(KvBudget::Bytes(parse_size(m)?)),
            (None, Some(t)) => Some(KvBudget::Tokens(t)),
            (None, None) => None,
        };
        Ok(EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: self.max_batched_tokens,
                max_seqs: self.max_seqs,
            },
            block_size: self.block_size,
            kv_budget,
            max_waiting: self.max_waiting,
            prefix_caching: !self.no_prefix_cache,
            speculative: self.spec.config()?,
            kv_type: self.kv_type,
            ..EngineConfig::default()
        })
    }
}

/// `512MiB`, `2GiB`, `300MB`, `1048576` -> bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let Ok(n) = num.parse::<f64>() else {
        bail!("--kv-memory {s:?}: expected a size such as 512MiB or 2GiB");
    };
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => (1u64 << 20) as f64,
        "g" | "gb" => 1e9,
        "gib" => (1u64 << 30) as f64,
        other => {
            bail!("--kv-memory {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)")
        }
    };
    let bytes = n * mult;
    if !(bytes >= 1.0 && bytes.is_finite()) {
        bail!("--kv-memory {s:?} must be a positive size");
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("300MB").unwrap(), 300_000_000);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert!(
            parse_size("lots")
                .unwrap_err()
                .to_string()
                .contains("512MiB")
        );
        assert!(
            parse_size("5 parsecs")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
    }
}
