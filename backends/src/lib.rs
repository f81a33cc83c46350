//! # cinder-backends
//!
//! The only crate that names concrete Burn backends. Cargo features (`flex` default, `ndarray`, `candle`,
//! `wgpu`, `cuda`) decide which are compiled in; everything else in Cinder is generic over
//! [`burn::tensor::backend::Backend`] and reaches a concrete backend only through [`dispatch`].
//!
//! [`InferenceBackend`] (in `backend.rs`) is Burn's `Backend` plus Cinder's op groups, one module
//! each: [`quant`], [`attention`], [`fused`], [`encoder`], [`memory`].
#![warn(missing_docs)]

use std::fmt;
use std::str::FromStr;

pub mod act;
pub mod attention;
mod backend;
pub mod counters;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod cube;
pub mod device;
pub mod encoder;
pub mod fused;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;
pub mod memory;
pub mod quant;
pub mod sample;

pub use attention::KvOps;
pub use backend::InferenceBackend;
pub use burn::tensor::backend::Backend;
pub use cinder_kernels as kernels;
pub use encoder::{EncoderAttention, EncoderOps};
pub use fused::FusedOps;
pub use memory::MemoryOps;
pub use quant::{QWeight, QuantOps};
pub use sample::SampleOps;

/// Errors choosing or starting a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The name is not a backend Cinder knows.
    #[error("unknown backend {0:?} (known: flex, ndarray, candle, wgpu, cuda, auto)")]
    Unknown(String),
    /// The name is not a KV cache type Cinder stores.
    #[error("unknown KV cache type {0:?} (known: f16, q8_0, q4_0)")]
    UnknownKvType(String),
    /// The backend exists but this binary was built without its Cargo feature.
    #[error(
        "backend {name} is not compiled in; rebuild with `--features {name}` (compiled in: {compiled})"
    )]
    NotCompiled {
        /// requested backend
        name: String,
        /// the ones available
        compiled: String,
    },
    /// No backend at all was compiled in.
    #[error("no backend compiled in: enable one of the features flex, ndarray, candle, wgpu, cuda")]
    NoneCompiled,
    /// A weight's bytes do not fit its declared shape and type.
    #[error("weight {name}: {reason}")]
    Weight {
        /// the weight's name
        name: String,
        /// what is wrong
        reason: String,
    },
    /// A paged-attention layout or KV store that cannot work (a scheduler bug, or a store too large).
    #[error("paged KV: {0}")]
    Layout(String),
    /// An accelerator backend found no device to run on.
    #[error("no {backend} device: looked for {looked_for}")]
    NoDevice {
        /// the backend asked for
        backend: String,
        /// what it looked for and did not find
        looked_for: String,
    },
    /// Reading a tensor back from the device failed.
    #[error("device readback: {0}")]
    Readback(String),
    /// The thread pool could not be configured.
    #[error("cannot set up {threads} CPU threads: {reason}")]
    Threads {
        /// requested thread count
        threads: usize,
        /// why
        reason: String,
    },
}

impl BackendError {
    /// `kind` is not compiled into this binary (the error names the feature and what is).
    pub fn not_compiled(kind: BackendKind) -> Self {
        BackendError::NotCompiled {
            name: kind.name().to_string(),
            compiled: compiled()
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The backends Cinder can be built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// burn-flex: Burn's fast portable CPU backend (default).
    Flex,
    /// burn-ndarray: CPU.
    Ndarray,
    /// burn-candle: candle's CPU backend.
    Candle,
    /// burn-wgpu: Vulkan / Metal / DX12 (and Mesa lavapipe on machines without a GPU).
    Wgpu,
    /// burn-cuda: NVIDIA GPUs.
    Cuda,
    /// Chosen when a model is loaded: the backend `CINDER_BACKEND` names if set, else CUDA if a
    /// GPU answers, then wgpu on a hardware adapter
    /// (a software rasterizer such as lavapipe is slower than the CPU kernels and is skipped),
    /// then the first compiled CPU backend ([`BackendKind::resolve`]). Never a backend's `KIND`.
    Auto,
}

impl BackendKind {
    /// Every kind, in order of preference for the default.
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Flex,
        BackendKind::Ndarray,
        BackendKind::Candle,
        BackendKind::Wgpu,
        BackendKind::Cuda,
    ];

    /// The CLI / feature name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Candle => "candle",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
            BackendKind::Auto => "auto",
        }
    }

    /// Whether this binary was built with the backend (for [`BackendKind::Auto`]: with any).
    pub fn is_compiled(self) -> bool {
        match self {
            BackendKind::Auto => !compiled().is_empty(),
            BackendKind::Flex => cfg!(feature = "flex"),
            BackendKind::Ndarray => cfg!(feature = "ndarray"),
            BackendKind::Candle => cfg!(feature = "candle"),
            BackendKind::Wgpu => cfg!(feature = "wgpu"),
            BackendKind::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// The concrete backend this kind runs on: itself, or for [`BackendKind::Auto`] the one
    /// `CINDER_BACKEND` names, else the first of CUDA (a GPU answers), wgpu (a hardware adapter
    /// answers) and the compiled CPU backends.
    ///
    /// # Examples
    ///
    /// ```
    /// use cinder_backends::BackendKind;
    /// let k = BackendKind::Auto.resolve().unwrap();
    /// assert_ne!(k, BackendKind::Auto);
    /// assert_eq!(BackendKind::Flex.resolve().unwrap(), BackendKind::Flex);
    /// ```
    pub fn resolve(self) -> Result<BackendKind, BackendError> {
        if self != BackendKind::Auto {
            return Ok(self);
        }
        // The operator's override, as for `preferred_kind`.
        if let Ok(name) = std::env::var("CINDER_BACKEND")
            && !name.trim().is_empty()
            && !name.trim().eq_ignore_ascii_case("auto")
        {
            return name.trim().parse();
        }
        for k in [BackendKind::Cuda, BackendKind::Wgpu] {
            if !k.is_compiled() {
                continue;
            }
            match device::hardware_device(k) {
                Ok(true) => return Ok(k),
                Ok(false) => tracing::info!(backend = %k, "only a software adapter: skipped"),
                Err(e) => tracing::info!(backend = %k, "skipped: {e}"),
            }
        }
        default_kind()
    }

    /// Whether the backend computes on the CPU (and so honours `--threads`).
    pub fn is_cpu(self) -> bool {
        matches!(
            self,
            BackendKind::Flex | BackendKind::Ndarray | BackendKind::Candle
        )
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = BackendError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(BackendKind::Auto);
        }
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| BackendError::Unknown(s.to_string()))
    }
}

/// The backends compiled into this binary.
pub fn compiled() -> Vec<BackendKind> {
    BackendKind::ALL
        .into_iter()
        .filter(|k| k.is_compiled())
        .collect()
}

/// The default backend: the first compiled CPU backend, else the first compiled one.
pub fn default_kind() -> Result<BackendKind, BackendError> {
    let c = compiled();
    c.iter()
        .copied()
        .find(|k| k.is_cpu())
        .or_else(|| c.first().copied())
        .ok_or(BackendError::NoneCompiled)
}

/// The backend a program that takes no `--backend` flag should use: `CINDER_BACKEND` when it is
/// set (it must name a compiled-in backend), else the first compiled-in accelerator (cuda, then
/// wgpu), else [`default_kind`]. So `cargo run --example generate --features cuda` runs on CUDA.
pub fn preferred_kind() -> Result<BackendKind, BackendError> {
    if let Ok(name) = std::env::var("CINDER_BACKEND") {
        // `dispatch` refuses a kind that is not compiled in, naming the feature to enable.
        return name.parse();
    }
    match [BackendKind::Cuda, BackendKind::Wgpu]
        .into_iter()
        .find(|k| k.is_compiled())
    {
        Some(k) => Ok(k),
        None => default_kind(),
    }
}

/// Sets the CPU thread count (rayon's global pool, which flex, ndarray and candle use). Call once, before
/// the first tensor operation; a second call with a different count is refused.
pub fn set_threads(threads: usize) -> Result<(), BackendError> {
    if threads == 0 {
        return Err(BackendError::Threads {
            threads,
            reason: "thread count must be at least 1".into(),
        });
    }
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
    {
        Ok(()) => Ok(()),
        Err(e) if rayon::current_num_threads() == threads => {
            tracing::debug!("thread pool already set up: {e}");
            Ok(())
        }
        Err(e) => Err(BackendError::Threads {
            threads,
            reason: e.to_string(),
        }),
    }
}

/// Runs `f` on a worker of the CPU thread pool (the one [`set_threads`] sizes, which the CPU
/// kernels use) and waits for it. Code with many short parallel sections runs faster this way: each
/// section starts at once on the calling worker and only wakes the others, where from an outside
/// thread every section is handed to the pool while the caller sleeps (a futex sleep and wake per
/// section). Harmless on device backends. `None` if `f` did not run.
pub fn on_thread_pool<R: Send>(f: impl FnOnce() -> R + Send) -> Option<R> {
    let mut out = None;
    rayon::scope(|s| s.spawn(|_| out = Some(f())));
    out
}

/// Memory available to new allocations on the host, in bytes (Linux `MemAvailable`), if known.
pub fn host_available_memory() -> Option<u64> {
    memory::host_memory().map(|m| m.free)
}

/// Code that runs on whichever backend the user picked: implement this once, generically, and hand it to
/// [`dispatch`].
pub trait BackendTask {
    /// What the task returns.
    type Output;
    /// Runs on backend `B` with its default device.
    fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output;
}

/// Runs `task` on the backend `kind` (which must be compiled in).
pub fn dispatch<T: BackendTask>(kind: BackendKind, task: T) -> Result<T::Output, BackendError> {
    // Without any backend feature every arm below is the error arm and `task` goes unused.
    let _ = &task;
    let kind = kind.resolve()?;
    if kind.is_compiled() {
        device::check_device(kind)?;
    }
    match kind {
        #[cfg(feature = "flex")]
        BackendKind::Flex => Ok(task.run::<types::Flex>(Default::default())),
        #[cfg(feature = "ndarray")]
        BackendKind::Ndarray => Ok(task.run::<types::NdArray>(Default::default())),
        #[cfg(feature = "candle")]
        BackendKind::Candle => Ok(task.run::<types::Candle>(Default::default())),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => Ok(task.run::<types::Wgpu>(Default::default())),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => Ok(task.run::<types::Cuda>(Default::default())),
        #[allow(unreachable_patterns)]
        other => Err(BackendError::not_compiled(other)),
    }
}

/// Something done once per compiled backend type ([`for_each_compiled`]): what a registry does to
/// hold a generic item ready for every backend a program can pick.
pub trait BackendVisitor {
    /// Called with each compiled backend type.
    fn visit<B: InferenceBackend>(&mut self);
}

/// Calls `v.visit::<B>()` for every backend type compiled in (no device is touched).
///
/// # Examples
///
/// ```
/// use cinder_backends::{BackendVisitor, InferenceBackend, for_each_compiled};
/// struct Names(Vec<&'static str>);
/// impl BackendVisitor for Names {
///     fn visit<B: InferenceBackend>(&mut self) {
///         self.0.push(B::KIND.name());
///     }
/// }
/// let mut n = Names(Vec::new());
/// for_each_compiled(&mut n);
/// assert_eq!(n.0.len(), cinder_backends::compiled().len());
/// ```
pub fn for_each_compiled<V: BackendVisitor>(v: &mut V) {
    let _ = &v;
    #[cfg(feature = "flex")]
    v.visit::<types::Flex>();
    #[cfg(feature = "ndarray")]
    v.visit::<types::NdArray>();
    #[cfg(feature = "candle")]
    v.visit::<types::Candle>();
    #[cfg(feature = "wgpu")]
    v.visit::<types::Wgpu>();
    #[cfg(feature = "cuda")]
    v.visit::<types::Cuda>();
}

/// Concrete backend types, one alias per compiled feature (f32 floats throughout).
pub mod types {
    /// burn-flex CPU backend.
    #[cfg(feature = "flex")]
    pub type Flex = burn_flex::Flex<f32>;
    /// burn-ndarray CPU backend.
    #[cfg(feature = "ndarray")]
    pub type NdArray = burn_ndarray::NdArray<f32>;
    /// burn-candle CPU backend.
    // Deprecated upstream in Burn 0.21 (burn-cubecl is its successor); still a backend users pick.
    #[cfg(feature = "candle")]
    #[allow(deprecated)]
    pub type Candle = burn_candle::Candle<f32, i64>;
    /// burn-wgpu backend.
    #[cfg(feature = "wgpu")]
    pub type Wgpu = burn_wgpu::Wgpu<f32, i32>;
    /// burn-cuda backend.
    #[cfg(feature = "cuda")]
    pub type Cuda = burn_cuda::Cuda<f32, i32>;
}
