//! Loading a model split between an accelerator and a CPU backend (`--gpu-layers N`): each backend
//! builds only its share of the weights ([`ModelPart`]), and [`Split`] joins them.

use std::path::Path;

use cinder_backends::{BackendKind, BackendTask, dispatch};
use cinder_models::{AnyModel, ModelPart, Split};
use cinder_runtime::InferenceBackend;

use crate::error::{ImportError, Result};
use crate::load::LoadedModel;
use crate::record::{load_model, load_model_part};

/// Loads the model at `path` with its first `gpu_layers` transformer blocks on the `accel` backend
/// and the rest, with the embedding and the head, on the CPU backend `C`. `gpu_layers == 0` loads it
/// whole on `C`; more layers than the model has offloads them all. A record's checksums are verified
/// by each share's load.
pub fn load_model_offloaded<C: InferenceBackend>(
    path: &Path,
    cpu_device: &C::Device,
    accel: BackendKind,
    gpu_layers: usize,
) -> Result<LoadedModel<C>> {
    if gpu_layers == 0 {
        return load_model(path, cpu_device);
    }
    if accel.is_cpu() || !C::KIND.is_cpu() {
        return Err(ImportError::Offload(format!(
            "layer offload runs the first layers on an accelerator (wgpu, cuda) and the rest on a \
             CPU backend (flex, ndarray, candle), not {accel} + {}",
            C::KIND
        )));
    }
    let host = load_model_part::<C>(path, cpu_device, &ModelPart::host(gpu_layers))?;
    let model = dispatch(
        accel,
        Front {
            path,
            host: host.model,
            gpu_layers,
        },
    )??;
    if let Some(p) = model.placement() {
        tracing::info!(placement = %p, "model split between backends");
    }
    Ok(LoadedModel { model, ..host })
}

/// Loads the accelerator's share on backend `A` and joins it to the host share.
struct Front<'a, C: InferenceBackend> {
    path: &'a Path,
    host: AnyModel<C>,
    gpu_layers: usize,
}

impl<C: InferenceBackend> BackendTask for Front<'_, C> {
    type Output = Result<AnyModel<C>>;

    fn run<A: InferenceBackend>(self, device: A::Device) -> Self::Output {
        let front =
            load_model_part::<A>(self.path, &device, &ModelPart::offloaded(self.gpu_layers))?;
        let names = (A::KIND.name(), C::KIND.name());
        Ok(Split::new(front.model, self.host, names)?.into())
    }
}
