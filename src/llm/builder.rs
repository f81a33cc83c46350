//! [`LlmBuilder`]: the settings an [`Llm`] starts with, and the backend task that loads the model
//! and starts its engine thread on the backend chosen at run time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cinder_backends::{BackendKind, BackendTask, InferenceBackend};
use cinder_importer::{ModelInfo, Offload};
use cinder_runtime::engine::{Engine, EngineConfig, SpeculativeConfig, check_draft_tokenizer};
use cinder_runtime::kv::KvBudget;
use cinder_runtime::model::CausalLm;
use cinder_runtime::tokenizer::Tokenizer;

use super::{Inner, Llm};
use crate::error::{Error, Result};

/// How a model proposes speculative tokens (the output is the same with or without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Speculative {
    /// Prompt lookup: guesses continue an n-gram already in the text.
    Ngram {
        /// most tokens proposed per step (1..=64)
        tokens: usize,
    },
    /// A smaller model with the same tokenizer proposes (catalog name or path).
    Draft {
        /// the draft model
        model: String,
        /// most tokens proposed per step (1..=64)
        tokens: usize,
    },
}

/// Settings for [`Llm::builder`]: backend, threads, layer offload, KV memory, batching,
/// speculation.
///
/// # Examples
///
/// ```no_run
/// use cinder::{BackendKind, Llm};
/// let llm = Llm::builder("smollm2-135m")
///     .backend(BackendKind::Auto)
///     .threads(2)
///     .kv_memory(256 << 20)
///     .max_seqs(8)
///     .build()?;
/// println!("running on {}", llm.backend());
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build`"]
pub struct LlmBuilder {
    pub(super) model: String,
    pub(super) backend: BackendKind,
    pub(super) threads: Option<usize>,
    pub(super) gpu_layers: usize,
    pub(super) engine: EngineConfig,
    pub(super) speculative: Option<Speculative>,
}

impl LlmBuilder {
    /// Where to run: a backend compiled in, or [`BackendKind::Auto`] (the default: CUDA, then a
    /// hardware wgpu adapter, then the CPU).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").backend(cinder::BackendKind::Flex).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// CPU threads for the CPU backends (the process-wide pool: set once per process).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").threads(2).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// Runs the first `n` layers on the accelerator (CUDA, else wgpu) and the rest on the CPU,
    /// like llama.cpp's `-ngl` (0: no split).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").gpu_layers(10).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn gpu_layers(mut self, n: usize) -> Self {
        self.gpu_layers = n;
        self
    }

    /// Bytes of KV cache (default: sized from the model and the free memory, at most 512 MiB).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").kv_memory(64 << 20).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn kv_memory(mut self, bytes: u64) -> Self {
        self.engine.kv_budget = Some(KvBudget::Bytes(bytes));
        self
    }

    /// How the KV cache stores its rows: f16 (the default), or Q8_0 / Q4_0 blocks, 0.53× and
    /// 0.28× the memory, on the CPU backends (a GPU backend refuses them at `build`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::runtime::kv::KvType;
    /// let llm = cinder::Llm::builder("smollm2-135m").kv_type(KvType::Q8_0).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn kv_type(mut self, kv_type: crate::runtime::kv::KvType) -> Self {
        self.engine.kv_type = kv_type;
        self
    }

    /// Most sequences decoding at once (default 16); more wait in the queue.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").max_seqs(4).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn max_seqs(mut self, n: usize) -> Self {
        self.engine.scheduler.max_seqs = n;
        self
    }

    /// Requests that may wait for a slot before more are refused with a queue-full error
    /// (default 64).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").max_waiting(256).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn max_waiting(mut self, n: usize) -> Self {
        self.engine.max_waiting = n;
        self
    }

    /// Speculative decoding for every request (same output, fewer forwards when guesses hold).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{Llm, Speculative};
    /// let llm = Llm::builder("smollm2-135m").speculative(Speculative::Ngram { tokens: 4 }).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn speculative(mut self, s: Speculative) -> Self {
        self.speculative = Some(s);
        self
    }

    /// The engine settings under the builder's setters, for what they do not cover.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut cfg = cinder::runtime::engine::EngineConfig::default();
    /// cfg.prefix_caching = false;
    /// let llm = cinder::Llm::builder("smollm2-135m").engine_config(cfg).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn engine_config(mut self, cfg: EngineConfig) -> Self {
        self.engine = cfg;
        self
    }

    /// Resolves the model (pulling a catalog model on first use), loads it on the backend and
    /// starts its engine thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn build(self) -> Result<Llm> {
        let mut engine = self.engine;
        let draft = match &self.speculative {
            None => None,
            Some(Speculative::Ngram { tokens }) => {
                engine.speculative = Some(spec_config(*tokens)?);
                None
            }
            Some(Speculative::Draft { model, tokens }) => {
                engine.speculative = Some(spec_config(*tokens)?);
                Some(crate::resolve_model(model)?)
            }
        };
        let (kind, offload) = offload_plan(self.backend, self.gpu_layers)?;
        if let Some(t) = self.threads {
            if kind.is_cpu() {
                cinder_backends::set_threads(t)?;
            } else {
                tracing::warn!("threads({t}) has no effect on the {kind} backend");
            }
        }
        let path = crate::resolve_model(&self.model)?;
        let task = Start {
            path,
            draft,
            offload,
            cfg: engine,
        };
        let s = cinder_backends::dispatch(kind, task)??;
        tracing::info!(backend = %kind, model = %self.model, "model loaded");
        Ok(Llm {
            inner: Arc::new(Inner {
                name: self.model,
                backend: kind,
                offload,
                handle: s.engine.handle(),
                engine: Some(s.engine),
                tokenizer: s.tokenizer,
                info: s.info,
                vocab: s.vocab,
                grammars: OnceLock::new(),
            }),
        })
    }
}

fn spec_config(tokens: usize) -> Result<SpeculativeConfig> {
    if tokens == 0 || tokens > 64 {
        return Err(Error::InvalidOption(format!(
            "speculative tokens must be 1..=64, not {tokens}"
        )));
    }
    Ok(SpeculativeConfig {
        draft_tokens: tokens,
        ..SpeculativeConfig::default()
    })
}

/// The backend a model loads on and the layer split, from a requested backend and a number of
/// layers to offload (0: none): with layers to offload, the named CPU backend (or the first
/// compiled one) holds the rest and the named accelerator (or CUDA, then wgpu) the first `layers`.
///
/// # Examples
///
/// ```
/// use cinder::BackendKind;
/// let (kind, offload) = cinder::llm::offload_plan(BackendKind::Flex, 0)?;
/// assert_eq!((kind, offload.is_none()), (BackendKind::Flex, true));
/// # Ok::<(), cinder::Error>(())
/// ```
pub fn offload_plan(backend: BackendKind, layers: usize) -> Result<(BackendKind, Option<Offload>)> {
    if layers == 0 {
        return Ok((backend.resolve()?, None));
    }
    // The CPU side: flex, ndarray, candle in that order; the accelerator: cuda, then wgpu.
    let first = |cpu: bool| {
        BackendKind::ALL
            .into_iter()
            .filter(|k| k.is_compiled() && k.is_cpu() == cpu)
            .min_by_key(|k| {
                if cpu {
                    0
                } else {
                    (*k != BackendKind::Cuda) as u8
                }
            })
    };
    let (accel, cpu) = match backend {
        BackendKind::Auto => (first(false), first(true)),
        k if k.is_cpu() => (first(false), Some(k)),
        k => (Some(k), first(true)),
    };
    let accel = accel.ok_or_else(|| {
        Error::InvalidOption(
            "gpu_layers needs an accelerator backend compiled in: rebuild with `--features wgpu` \
             or `--features cuda`"
                .into(),
        )
    })?;
    if !accel.is_compiled() {
        return Err(cinder_backends::BackendError::not_compiled(accel).into());
    }
    let cpu = cpu.ok_or_else(|| {
        Error::InvalidOption(
            "gpu_layers runs the layers it does not offload on a CPU backend; none is compiled in"
                .into(),
        )
    })?;
    tracing::info!(accelerator = %accel, layers, "layer offload");
    Ok((cpu, Some(Offload { accel, layers })))
}

/// What the backend task hands back: everything but the backend type.
struct Started {
    engine: Engine,
    tokenizer: Arc<Tokenizer>,
    info: ModelInfo,
    vocab: usize,
}

/// Loads the model (and a draft) on `B` and starts the engine thread.
struct Start {
    path: PathBuf,
    draft: Option<PathBuf>,
    offload: Option<Offload>,
    cfg: EngineConfig,
}

impl Start {
    fn load<B: InferenceBackend>(
        &self,
        path: &Path,
        device: &B::Device,
    ) -> Result<cinder_importer::LoadedModel<B>> {
        Ok(match self.offload {
            Some(o) => cinder_importer::load_model_offloaded::<B>(path, device, o)?,
            None => cinder_importer::load_model::<B>(path, device)?,
        })
    }
}

impl BackendTask for Start {
    type Output = Result<Started>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<Started> {
        let m = self.load::<B>(&self.path, &device)?;
        let draft = match &self.draft {
            Some(p) => {
                let d = self.load::<B>(p, &device)?;
                check_draft_tokenizer(&m.tokenizer, &d.tokenizer)?;
                Some(Box::new(d.model) as Box<dyn CausalLm<B> + Send + Sync>)
            }
            None => None,
        };
        let vocab = m.model.vocab_size();
        let engine =
            Engine::start_with_draft::<B, _>(m.model, draft, m.tokenizer.clone(), self.cfg)?;
        Ok(Started {
            engine,
            tokenizer: m.tokenizer,
            info: m.info,
            vocab,
        })
    }
}
