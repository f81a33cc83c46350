//! Whether an accelerator backend finds a device, asked before Burn touches it: without one,
//! burn-cuda and burn-wgpu panic on a background thread (the caller sees a bare `RecvError`), so
//! [`crate::dispatch`] checks first and returns [`BackendError::NoDevice`] naming the backend and
//! what was looked for.

use crate::{BackendError, BackendKind};

/// Checks that `kind` has a device to run on (always true for the CPU backends).
pub fn check_device(kind: BackendKind) -> Result<(), BackendError> {
    match kind {
        BackendKind::Wgpu => wgpu_device(),
        BackendKind::Cuda => cuda_device(),
        _ => Ok(()),
    }
}

/// Whether `kind` has a hardware device: a CPU backend always; CUDA when [`check_device`] passes;
/// wgpu when an adapter other than a CPU (software) one is listed. `Err` when there is no device.
pub fn hardware_device(kind: BackendKind) -> Result<bool, BackendError> {
    check_device(kind)?;
    match kind {
        BackendKind::Wgpu => Ok(wgpu_hardware()),
        _ => Ok(true),
    }
}

#[cfg(feature = "wgpu")]
fn wgpu_hardware() -> bool {
    wgpu_adapters()
        .0
        .iter()
        .any(|a| a.get_info().device_type != wgpu_api::DeviceType::Cpu)
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_hardware() -> bool {
    false
}

#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
fn no_device(backend: &str, looked_for: impl Into<String>) -> BackendError {
    BackendError::NoDevice {
        backend: backend.to_string(),
        looked_for: looked_for.into(),
    }
}

/// The adapters of the graphics API CubeCL's wgpu runtime uses on this platform, and what to
/// name when there are none.
#[cfg(feature = "wgpu")]
fn wgpu_adapters() -> (Vec<wgpu_api::Adapter>, &'static str) {
    #[cfg(target_os = "macos")]
    let (backends, what) = (wgpu_api::Backends::METAL, "a Metal adapter");
    #[cfg(not(target_os = "macos"))]
    let (backends, what) = (
        wgpu_api::Backends::VULKAN,
        "a Vulkan adapter (the Vulkan loader, libvulkan.so.1, and a driver: a GPU's, or Mesa's \
         lavapipe on a machine without one: Debian packages libvulkan1 and mesa-vulkan-drivers)",
    );
    let instance = wgpu_api::Instance::new(wgpu_api::InstanceDescriptor {
        backends,
        ..wgpu_api::InstanceDescriptor::new_without_display_handle()
    });
    (
        cubecl::future::block_on(instance.enumerate_adapters(backends)),
        what,
    )
}

#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<(), BackendError> {
    let (adapters, what) = wgpu_adapters();
    if adapters.is_empty() {
        return Err(no_device("wgpu", what));
    }
    Ok(())
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> Result<(), BackendError> {
    Ok(())
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<(), BackendError> {
    // SAFETY: both only try to load the library (dlopen); nothing is called through it.
    let (driver, nvrtc) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    };
    if !driver {
        return Err(no_device(
            "cuda",
            "the NVIDIA driver's libcuda.so (none could be loaded: no NVIDIA driver installed)",
        ));
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => return Err(no_device("cuda", "an NVIDIA GPU (the driver lists none)")),
        Err(e) => {
            return Err(no_device(
                "cuda",
                format!("an NVIDIA GPU (the driver could not be initialized: {e})"),
            ));
        }
    }
    if !nvrtc {
        return Err(no_device(
            "cuda",
            "libnvrtc.so (CUDA's runtime compiler, which builds the kernels): put the CUDA \
             toolkit's lib directory on LD_LIBRARY_PATH and set CUDA_PATH",
        ));
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<(), BackendError> {
    Ok(())
}
