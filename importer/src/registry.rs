//! The architecture registry: what the loader consults to turn a file's config and tensors into a
//! model. Built-in architectures are registered the same way a downstream crate registers its own
//! ([`register`]), so a new architecture is its file plus one registration line.
//!
//! An [`Architecture`] is written generically over the backend; the registry holds it ready for
//! every compiled backend type (one builder per type, made at registration by
//! [`cinder_backends::for_each_compiled`]) and hands the loader the builder for its `B`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use cinder_backends::{BackendVisitor, InferenceBackend, for_each_compiled};
use cinder_gguf::GgufFile;
use cinder_models::{AnyModel, Blocks, Decoder};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ImportError, Result};
use crate::gguf_weights::{StoredTensor, TensorStore};

/// A Hugging Face checkpoint as an architecture reads it: its config from `config.json`, its
/// tensors renamed and laid out as the architecture's GGUF files hold them (so one [`Architecture::build`]
/// serves both formats).
#[derive(Debug)]
pub struct HfModel<C> {
    /// the config
    pub config: C,
    /// the GGUF architecture name the checkpoint is (`llama`, `qwen2`, …), for reports
    pub arch: String,
    /// the model's name, if the config gives one
    pub name: Option<String>,
    /// tensors in GGUF names and layout, in a stable order
    pub tensors: Vec<(String, StoredTensor)>,
    /// the files read (config, weights, index)
    pub sources: Vec<PathBuf>,
}

/// An architecture's hyper-parameters: what a record's `config.json` stores, and what sizes the
/// tokenizer check and the layer split need.
pub trait ArchitectureConfig:
    fmt::Debug + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Embedding rows (the vocabulary the tokenizer must fit).
    fn vocab_size(&self) -> usize;
    /// Transformer blocks.
    fn n_layers(&self) -> usize;
}

/// A decoder architecture the loader can build: its config from GGUF metadata, and the model (or
/// one device's share of it, for layer offload) from GGUF-named tensors on any backend.
///
/// Implement it for a unit struct, build the model from Cinder's layers
/// (`cinder_models::layers`: RMSNorm, RoPE, attention through the paged cache, quantized linear,
/// MLPs) and [`register`] it; [`crate::load_model`], the engine, the server and `cinder::Llm` then
/// take the architecture's files like a built-in one's.
///
/// # Examples
///
/// ```no_run
/// use cinder_importer::registry::{Architecture, ArchitectureConfig};
/// use cinder_importer::{Result, TensorStore};
/// # #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
/// # struct MyConfig { vocab: usize, layers: usize }
/// # impl ArchitectureConfig for MyConfig {
/// #     fn vocab_size(&self) -> usize { self.vocab }
/// #     fn n_layers(&self) -> usize { self.layers }
/// # }
/// struct MyArch;
/// impl Architecture for MyArch {
///     type Config = MyConfig;
///     fn name(&self) -> &'static str { "myarch" }
///     fn gguf_architectures(&self) -> &'static [&'static str] { &["myarch"] }
///     fn config_from_gguf(&self, file: &cinder_gguf::GgufFile) -> Result<MyConfig> {
///         # unimplemented!()
///         // read `myarch.block_count`, … from the metadata
///     }
///     fn build<B: cinder_backends::InferenceBackend>(
///         &self,
///         cfg: &MyConfig,
///         store: &dyn TensorStore,
///         device: &B::Device,
///     ) -> Result<cinder_models::AnyModel<B>> {
///         # unimplemented!()
///         // load the weights through a `TableWeights` and wrap the model in `AnyModel::new`
///     }
/// }
/// cinder_importer::registry::register(MyArch);
/// ```
pub trait Architecture: Send + Sync + 'static {
    /// The hyper-parameters.
    type Config: ArchitectureConfig;

    /// The name a record's `config.json` stores (`"architecture"`), unique in the registry.
    fn name(&self) -> &'static str;

    /// The GGUF `general.architecture` values this architecture loads.
    fn gguf_architectures(&self) -> &'static [&'static str];

    /// The config a GGUF file's metadata describes; refuses tensors the model would not apply.
    fn config_from_gguf(&self, file: &GgufFile) -> Result<Self::Config>;

    /// The Hugging Face `config.json` `architectures[0]` values this architecture reads with
    /// [`Architecture::read_hf`] (none by default: its checkpoints then load from GGUF only).
    fn hf_architectures(&self) -> &'static [&'static str] {
        &[]
    }

    /// Reads the HF checkpoint folder `dir` (its `config.json` names one of
    /// [`Architecture::hf_architectures`]); `arch` is the GGUF architecture the caller requires
    /// (`cinder import --arch`), if any.
    fn read_hf(&self, dir: &Path, _arch: Option<&str>) -> Result<HfModel<Self::Config>> {
        Err(ImportError::Unsupported(format!(
            "{}: the {} architecture reads no Hugging Face checkpoints",
            dir.display(),
            self.name()
        )))
    }

    /// Builds the whole model from GGUF-named tensors on `device`.
    fn build<B: InferenceBackend>(
        &self,
        cfg: &Self::Config,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>>;

    /// The embedding and head with blocks `layers` only (the CPU's share of a split model).
    /// Architectures that do not split say so.
    fn build_decoder<B: InferenceBackend>(
        &self,
        _cfg: &Self::Config,
        _store: &dyn TensorStore,
        _device: &B::Device,
        _layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        Err(no_split(self.name()))
    }

    /// Blocks `layers` alone (the accelerator's share of a split model).
    fn build_blocks<B: InferenceBackend>(
        &self,
        _cfg: &Self::Config,
        _store: &dyn TensorStore,
        _device: &B::Device,
        _layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        Err(no_split(self.name()))
    }
}

fn no_split(name: &str) -> ImportError {
    ImportError::Offload(format!(
        "the {name} architecture cannot be split between backends (it builds no separate blocks)"
    ))
}

/// What the loader asks of an architecture on backend `B`, with the config type erased.
trait BuildOn<B: InferenceBackend>: Send + Sync {
    fn build(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>>;
    fn build_decoder(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>>;
    fn build_blocks(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>>;
}

struct Typed<A>(Arc<A>);

fn config_of<A: Architecture>(cfg: &dyn Any) -> Result<&A::Config> {
    cfg.downcast_ref::<A::Config>().ok_or_else(|| {
        ImportError::Config(format!(
            "a config of another architecture given to {}",
            std::any::type_name::<A>()
        ))
    })
}

impl<A: Architecture, B: InferenceBackend> BuildOn<B> for Typed<A> {
    fn build(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        self.0.build::<B>(config_of::<A>(cfg)?, store, device)
    }
    fn build_decoder(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        self.0
            .build_decoder::<B>(config_of::<A>(cfg)?, store, device, layers)
    }
    fn build_blocks(
        &self,
        cfg: &dyn Any,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        self.0
            .build_blocks::<B>(config_of::<A>(cfg)?, store, device, layers)
    }
}

/// The backend-independent face of a registered architecture.
trait Entry: Send + Sync {
    fn name(&self) -> &'static str;
    fn gguf_architectures(&self) -> &'static [&'static str];
    fn hf_architectures(&self) -> &'static [&'static str];
    fn read_hf(
        &self,
        dir: &Path,
        arch: Option<&str>,
    ) -> Result<(Box<dyn Any + Send + Sync>, HfModel<()>)>;
    fn parse_gguf(&self, file: &GgufFile) -> Result<Box<dyn Any + Send + Sync>>;
    fn parse_json(&self, v: serde_json::Value) -> Result<Box<dyn Any + Send + Sync>>;
    fn facts(&self, cfg: &dyn Any) -> Option<(usize, usize, serde_json::Value)>;
}

impl<A: Architecture> Entry for Typed<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn gguf_architectures(&self) -> &'static [&'static str] {
        self.0.gguf_architectures()
    }
    fn hf_architectures(&self) -> &'static [&'static str] {
        self.0.hf_architectures()
    }
    fn read_hf(
        &self,
        dir: &Path,
        arch: Option<&str>,
    ) -> Result<(Box<dyn Any + Send + Sync>, HfModel<()>)> {
        let m = self.0.read_hf(dir, arch)?;
        let rest = HfModel {
            config: (),
            arch: m.arch,
            name: m.name,
            tensors: m.tensors,
            sources: m.sources,
        };
        Ok((Box::new(m.config), rest))
    }
    fn parse_gguf(&self, file: &GgufFile) -> Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(self.0.config_from_gguf(file)?))
    }
    fn parse_json(&self, v: serde_json::Value) -> Result<Box<dyn Any + Send + Sync>> {
        let c: A::Config = serde_json::from_value(v)
            .map_err(|e| ImportError::Config(format!("not a {} config: {e}", self.0.name())))?;
        Ok(Box::new(c))
    }
    fn facts(&self, cfg: &dyn Any) -> Option<(usize, usize, serde_json::Value)> {
        let c = cfg.downcast_ref::<A::Config>()?;
        Some((c.vocab_size(), c.n_layers(), serde_json::to_value(c).ok()?))
    }
}

/// One registered architecture: its face and one builder per compiled backend type.
#[derive(Clone)]
pub(crate) struct Registered {
    entry: Arc<dyn Entry>,
    /// `TypeId::of::<B>()` -> `Arc<dyn BuildOn<B>>`
    builders: Arc<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
}

struct Collect<A> {
    arch: Arc<A>,
    out: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl<A: Architecture> BackendVisitor for Collect<A> {
    fn visit<B: InferenceBackend>(&mut self) {
        let b: Arc<dyn BuildOn<B>> = Arc::new(Typed(self.arch.clone()));
        self.out.insert(TypeId::of::<B>(), Box::new(b));
    }
}

fn registry() -> &'static RwLock<Vec<Registered>> {
    static R: OnceLock<RwLock<Vec<Registered>>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(crate::builtin::architectures()))
}

/// The registry entry of `arch`, ready for every compiled backend.
pub(crate) fn entry_of<A: Architecture>(arch: A) -> Registered {
    let arch = Arc::new(arch);
    let mut c = Collect {
        arch: arch.clone(),
        out: HashMap::new(),
    };
    for_each_compiled(&mut c);
    Registered {
        entry: Arc::new(Typed(arch)),
        builders: Arc::new(c.out),
    }
}

/// Registers `arch` for every loader in this process: its GGUF architecture names and its record
/// name now load with it. A later registration of the same record name replaces the earlier one
/// (a crate may override a built-in).
///
/// # Examples
///
/// ```no_run
/// # use cinder_importer::registry::Architecture;
/// # fn f<A: Architecture>(my_arch: A) {
/// cinder_importer::registry::register(my_arch);
/// # }
/// ```
pub fn register<A: Architecture>(arch: A) {
    let r = entry_of(arch);
    let mut all = registry().write().unwrap_or_else(|p| p.into_inner());
    all.retain(|e| e.entry.name() != r.entry.name());
    tracing::debug!(arch = r.entry.name(), "architecture registered");
    // Newest first: a crate's architecture wins over a built-in for the same GGUF name.
    all.insert(0, r);
}

/// The GGUF architecture names the registry loads, by record name.
///
/// # Examples
///
/// ```
/// let names = cinder_importer::registry::architectures();
/// assert!(names.iter().any(|(n, gguf)| *n == "llama" && gguf.contains(&"qwen2")));
/// ```
pub fn architectures() -> Vec<(&'static str, &'static [&'static str])> {
    let all = registry().read().unwrap_or_else(|p| p.into_inner());
    all.iter()
        .map(|r| (r.entry.name(), r.entry.gguf_architectures()))
        .collect()
}

fn find(pred: impl Fn(&dyn Entry) -> bool) -> Option<Registered> {
    let all = registry().read().unwrap_or_else(|p| p.into_inner());
    all.iter().find(|r| pred(r.entry.as_ref())).cloned()
}

/// A decoder's config, whichever architecture: what a record's `config.json` holds
/// (`{"architecture": NAME, "config": {...}}`) and what the loader builds a model from.
#[derive(Clone)]
pub struct ArchConfig {
    arch: Registered,
    config: Arc<dyn Any + Send + Sync>,
    vocab_size: usize,
    n_layers: usize,
    json: serde_json::Value,
}

impl fmt::Debug for ArchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArchConfig")
            .field("architecture", &self.name())
            .field("config", &self.json)
            .finish()
    }
}

impl PartialEq for ArchConfig {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.json == other.json
    }
}

impl ArchConfig {
    fn from_parts(arch: Registered, config: Box<dyn Any + Send + Sync>) -> Result<Self> {
        let (vocab_size, n_layers, json) = arch.entry.facts(config.as_ref()).ok_or_else(|| {
            ImportError::Config(format!(
                "{}: the config is not of this architecture's type, or does not serialize",
                arch.entry.name()
            ))
        })?;
        Ok(Self {
            arch,
            config: Arc::from(config),
            vocab_size,
            n_layers,
            json,
        })
    }

    /// `config` of the registered architecture called `name`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(cfg: cinder_models::llama::LlamaConfig) -> cinder_importer::Result<()> {
    /// let c = cinder_importer::ArchConfig::new("llama", cfg)?;
    /// assert_eq!(c.name(), "llama");
    /// # Ok(()) }
    /// ```
    pub fn new<C: ArchitectureConfig>(name: &str, config: C) -> Result<Self> {
        let arch = find(|e| e.name() == name).ok_or_else(|| unknown(name))?;
        Self::from_parts(arch, Box::new(config))
    }

    /// The config a GGUF file's metadata describes, by the registered architecture that loads its
    /// `general.architecture`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let name = file.architecture()?;
        let arch = find(|e| e.gguf_architectures().contains(&name)).ok_or_else(|| unknown(name))?;
        let c = arch.entry.parse_gguf(file)?;
        Self::from_parts(arch, c)
    }

    /// The registered architecture's name (`llama`, `gemma3`, …).
    pub fn name(&self) -> &'static str {
        self.arch.entry.name()
    }

    /// The typed config, when it is a `C`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(c: &cinder_importer::ArchConfig) {
    /// if let Some(l) = c.get::<cinder_models::llama::LlamaConfig>() {
    ///     assert!(l.n_layers > 0);
    /// }
    /// # }
    /// ```
    pub fn get<C: ArchitectureConfig>(&self) -> Option<&C> {
        self.config.downcast_ref::<C>()
    }

    /// Embedding rows (the vocabulary the tokenizer must fit).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The number of transformer blocks.
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }

    fn builder<B: InferenceBackend>(&self) -> Result<&Arc<dyn BuildOn<B>>> {
        self.arch
            .builders
            .get(&TypeId::of::<B>())
            .and_then(|b| b.downcast_ref::<Arc<dyn BuildOn<B>>>())
            .ok_or_else(|| {
                ImportError::Config(format!(
                    "the {} backend was not compiled in when {} was registered",
                    B::KIND,
                    self.name()
                ))
            })
    }

    /// Builds the whole model from GGUF-named tensors.
    pub fn build<B: InferenceBackend>(
        &self,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        self.builder::<B>()?
            .build(self.config.as_ref(), store, device)
    }

    /// Builds the embedding and head with blocks `layers` only (the CPU's share of a split model).
    pub fn build_decoder<B: InferenceBackend>(
        &self,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        self.builder::<B>()?
            .build_decoder(self.config.as_ref(), store, device, layers)
    }

    /// Builds blocks `layers` alone (the accelerator's share of a split model).
    pub fn build_blocks<B: InferenceBackend>(
        &self,
        store: &dyn TensorStore,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        self.builder::<B>()?
            .build_blocks(self.config.as_ref(), store, device, layers)
    }
}

/// The Hugging Face architecture names the registry reads (`LlamaForCausalLM`, …), sorted.
pub fn hf_architectures() -> Vec<&'static str> {
    let all = registry().read().unwrap_or_else(|p| p.into_inner());
    let mut names: Vec<&'static str> = all
        .iter()
        .flat_map(|r| r.entry.hf_architectures().iter().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Reads the HF checkpoint `dir` whose `config.json` declares `declared`, by the registered
/// architecture that reads it: the config and the checkpoint's tensors in GGUF names.
pub(crate) fn read_hf(
    dir: &Path,
    declared: &str,
    arch: Option<&str>,
) -> Result<(ArchConfig, HfModel<()>)> {
    let entry = find(|e| e.hf_architectures().contains(&declared)).ok_or_else(|| {
        ImportError::UnsupportedArch(declared.to_string(), hf_architectures().join(", "))
    })?;
    let (config, rest) = entry.entry.read_hf(dir, arch)?;
    Ok((ArchConfig::from_parts(entry, config)?, rest))
}

/// `name` is not registered: the error lists every name that is (record and GGUF names).
fn unknown(name: &str) -> ImportError {
    let mut known: Vec<&str> = architectures()
        .into_iter()
        .flat_map(|(n, gguf)| std::iter::once(n).chain(gguf.iter().copied()))
        .collect();
    known.sort_unstable();
    known.dedup();
    ImportError::UnsupportedArch(name.to_string(), known.join(", "))
}

impl Serialize for ArchConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        serde_json::json!({ "architecture": self.name(), "config": self.json }).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for ArchConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(serde::Deserialize)]
        struct Tagged {
            architecture: String,
            config: serde_json::Value,
        }
        let t = Tagged::deserialize(d)?;
        let arch = find(|e| e.name() == t.architecture)
            .ok_or_else(|| D::Error::custom(unknown(&t.architecture)))?;
        let c = arch.entry.parse_json(t.config).map_err(D::Error::custom)?;
        ArchConfig::from_parts(arch, c).map_err(D::Error::custom)
    }
}
