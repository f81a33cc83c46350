//! Loading a language model: [`load_model`] for any path (a GGUF file, a record directory, an HF
//! SafeTensors checkpoint), whole on one backend or split across two ([`load_model_offloaded`]).
//!
//! [`Source`] reads the model's config, tensors and tokenizer from whatever format the path holds;
//! what is built from them (the whole model, or one device's share) is decided here, once for
//! every format.

use std::path::Path;

use cinder_backends::{BackendKind, BackendTask, dispatch};
use cinder_models::{AnyModel, Split};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

use crate::error::{ImportError, Result};
use crate::source::{Loaded, ModelInfo, Source};

/// A model ready to run, with its tokenizer and the file it came from.
pub struct LoadedModel<B: InferenceBackend> {
    /// the network
    pub model: AnyModel<B>,
    /// the tokenizer built from the same file (shared with engines)
    pub tokenizer: std::sync::Arc<Tokenizer>,
    /// file facts
    pub info: ModelInfo,
}

/// Loads any LLM path (a record directory, an HF SafeTensors checkpoint directory, or a GGUF file)
/// whole on `device`: [`Source::open`], then [`Source::build`]. A record's checksums are verified
/// before the model is handed out.
pub fn load_model<B: InferenceBackend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>> {
    let m = Source::open(path)?.build::<B>(device)?;
    tracing::info!(arch = %m.info.arch, format = %m.info.format, params = m.info.n_params, "model loaded");
    Ok(m)
}

/// Layer offload: the first `layers` transformer blocks on the accelerator backend `accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    /// the accelerator (wgpu or cuda)
    pub accel: BackendKind,
    /// how many blocks it runs (more than the model has: all of them)
    pub layers: usize,
}

/// [`load_model`] with the first `offload.layers` transformer blocks on the accelerator
/// `offload.accel` and the rest, with the embedding and the head, on the CPU backend `C`
/// ([`Split`]). 0 layers loads the model whole on `C`. Each backend builds only its share of the
/// weights.
pub fn load_model_offloaded<C: InferenceBackend>(
    path: &Path,
    cpu_device: &C::Device,
    offload: Offload,
) -> Result<LoadedModel<C>> {
    if offload.layers == 0 {
        return load_model(path, cpu_device);
    }
    let accel = offload.accel;
    if accel.is_cpu() || !C::KIND.is_cpu() {
        return Err(ImportError::Offload(format!(
            "layer offload runs the first layers on an accelerator (wgpu, cuda) and the rest on a \
             CPU backend (flex, ndarray, candle), not {accel} + {}",
            C::KIND
        )));
    }
    let Loaded {
        built: model,
        tokenizer,
        info,
    } = dispatch(
        accel,
        Front::<C> {
            path,
            cpu_device,
            layers: offload.layers,
        },
    )??;
    if let Some(p) = model.placement() {
        tracing::info!(placement = %p, "model split between backends");
    }
    Ok(LoadedModel {
        model,
        tokenizer: std::sync::Arc::new(tokenizer),
        info,
    })
}

/// Builds both shares of a split model from one read of the file: blocks `0..n` on the
/// accelerator `A` it is dispatched to, the rest with the ends on `C`.
struct Front<'a, C: InferenceBackend> {
    path: &'a Path,
    cpu_device: &'a C::Device,
    layers: usize,
}

impl<C: InferenceBackend> BackendTask for Front<'_, C> {
    type Output = Result<Loaded<AnyModel<C>>>;

    fn run<A: InferenceBackend>(self, device: A::Device) -> Self::Output {
        let cpu_device = self.cpu_device;
        let layers = self.layers;
        Source::open(self.path)?.build_with(Box::new(move |c, s| {
            let n = layers.min(c.n_layers());
            let front = c.build_blocks::<A>(s, &device, 0..n)?;
            let back = c.build_decoder::<C>(s, cpu_device, n..usize::MAX)?;
            let names = (A::KIND.name(), C::KIND.name());
            Ok(AnyModel::new(Split::new(front, device, back, names)?))
        }))
    }
}
