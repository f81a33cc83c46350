//! The architectures Cinder ships, registered through the same [`Architecture`] trait a downstream
//! crate implements: the Llama family (Llama 2/3, SmolLM, Mistral, Mixtral, Qwen2, Qwen3,
//! Qwen3-MoE, OLMoE, Phi-3) and Gemma 3.

use std::ops::Range;
use std::path::Path;

use cinder_gguf::GgufFile;
use cinder_models::gemma3::{Gemma3, Gemma3Blocks, Gemma3Config};
use cinder_models::llama::{Llama, LlamaBlocks, LlamaConfig};
use cinder_models::{AnyModel, Blocks, Decoder};
use cinder_runtime::InferenceBackend;

use crate::arch::{self, GEMMA3_GGUF_NAMES, LLAMA_FAMILY, LLAMA_GGUF_NAMES};
use crate::error::Result;
use crate::fused::FusedSplit;
use crate::gguf_weights::{TableWeights, TensorStore};
use crate::registry::{Architecture, ArchitectureConfig, HfModel, Registered, entry_of};

/// Every built-in architecture, in lookup order.
pub(crate) fn architectures() -> Vec<Registered> {
    vec![entry_of(LlamaFamily), entry_of(Gemma3Arch)]
}

impl ArchitectureConfig for LlamaConfig {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn n_layers(&self) -> usize {
        self.n_layers
    }
}

impl ArchitectureConfig for Gemma3Config {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn n_layers(&self) -> usize {
        self.n_layers
    }
}

/// Llama-style decoders ([`cinder_models::llama`]); Phi-3's fused projections are split on load.
pub struct LlamaFamily;

impl Architecture for LlamaFamily {
    type Config = LlamaConfig;

    fn name(&self) -> &'static str {
        "llama"
    }

    fn gguf_architectures(&self) -> &'static [&'static str] {
        LLAMA_FAMILY
    }

    fn config_from_gguf(&self, file: &GgufFile) -> Result<LlamaConfig> {
        let name = file.architecture()?;
        let tables = arch::llama_family_tables(file, name)?;
        arch::check_tensor_names(file, name, tables)?;
        arch::llama_config(file)
    }

    fn hf_architectures(&self) -> &'static [&'static str] {
        crate::hf_llama::hf_names()
    }

    fn read_hf(&self, dir: &Path, arch: Option<&str>) -> Result<HfModel<LlamaConfig>> {
        let ck = crate::hf_llama::read(dir, arch)?;
        Ok(HfModel {
            config: ck.config,
            arch: ck.arch,
            name: ck.name,
            tensors: ck.tensors,
            sources: ck.sources,
        })
    }

    fn build<B: InferenceBackend>(
        &self,
        cfg: &LlamaConfig,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        let split = FusedSplit::new(store, cfg);
        let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
        Ok(AnyModel::new(Llama::load(cfg.clone(), &mut src)?))
    }

    fn build_decoder<B: InferenceBackend>(
        &self,
        cfg: &LlamaConfig,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        let split = FusedSplit::new(store, cfg);
        let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
        Ok(Box::new(Llama::load_layers(cfg.clone(), &mut src, layers)?))
    }

    fn build_blocks<B: InferenceBackend>(
        &self,
        cfg: &LlamaConfig,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        let split = FusedSplit::new(store, cfg);
        let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
        Ok(Box::new(LlamaBlocks::load(cfg.clone(), &mut src, layers)?))
    }
}

/// Gemma 3 ([`cinder_models::gemma3`]).
pub struct Gemma3Arch;

impl Architecture for Gemma3Arch {
    type Config = Gemma3Config;

    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn gguf_architectures(&self) -> &'static [&'static str] {
        &["gemma3"]
    }

    fn config_from_gguf(&self, file: &GgufFile) -> Result<Gemma3Config> {
        arch::check_tensor_names(file, "gemma3", GEMMA3_GGUF_NAMES)?;
        arch::gemma3_config(file)
    }

    fn build<B: InferenceBackend>(
        &self,
        cfg: &Gemma3Config,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        let mut src = TableWeights::<B, _>::new(store, GEMMA3_GGUF_NAMES, device.clone());
        Ok(AnyModel::new(Gemma3::load(cfg.clone(), &mut src)?))
    }

    fn build_decoder<B: InferenceBackend>(
        &self,
        cfg: &Gemma3Config,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        let mut src = TableWeights::<B, _>::new(store, GEMMA3_GGUF_NAMES, device.clone());
        Ok(Box::new(Gemma3::load_layers(
            cfg.clone(),
            &mut src,
            layers,
        )?))
    }

    fn build_blocks<B: InferenceBackend>(
        &self,
        cfg: &Gemma3Config,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        let mut src = TableWeights::<B, _>::new(store, GEMMA3_GGUF_NAMES, device.clone());
        Ok(Box::new(Gemma3Blocks::load(cfg.clone(), &mut src, layers)?))
    }
}
