//! Counters of what a forward costs on a device: kernel launches ("dispatches") and host syncs
//! (blocking reads of device data). `cinder bench` reports them per decoded token.
//!
//! - Host syncs are counted here: every read of a forward's results goes through [`read_back`].
//! - Launches are counted by [`LaunchCounter`] (CubeCL backends), a `tracing` layer over the span
//!   CubeCL opens for every kernel launch, Burn's own and Cinder's alike. It counts only where the
//!   program installs it (the CLI does).

use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::backend::Backend;
use burn::tensor::{BasicOps, Tensor, TensorData};

static HOST_SYNCS: AtomicU64 = AtomicU64::new(0);
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Reads a tensor back to the host (one blocking sync on a device), counting it.
pub fn read_back<B: Backend, const D: usize, K: BasicOps<B>>(t: Tensor<B, D, K>) -> TensorData {
    HOST_SYNCS.fetch_add(1, Ordering::Relaxed);
    t.into_data()
}

/// Host syncs so far ([`read_back`] calls).
pub fn host_syncs() -> u64 {
    HOST_SYNCS.load(Ordering::Relaxed)
}

/// Kernel launches so far, where a [`LaunchCounter`] is installed.
pub fn launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Whether launches are being counted (a CubeCL backend is compiled in, with its launch spans).
pub fn counts_launches() -> bool {
    cfg!(any(feature = "wgpu", feature = "cuda"))
}

/// A `tracing` layer that counts CubeCL kernel launches (the `launch_inner` span of
/// `cubecl_runtime::client`, opened once per launch). Install it with a filter that lets
/// `cubecl_runtime::client` through at `TRACE` ([`LaunchCounter::TARGET`]), beside any other layers.
#[derive(Debug, Clone, Copy, Default)]
pub struct LaunchCounter;

impl LaunchCounter {
    /// The target the launch spans are emitted under.
    pub const TARGET: &'static str = "cubecl_runtime::client";
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LaunchCounter {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let m = attrs.metadata();
        if m.name() == "launch_inner" && m.target() == Self::TARGET {
            LAUNCHES.fetch_add(1, Ordering::Relaxed);
        }
    }
}
