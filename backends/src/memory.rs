//! Op group: how much memory a backend's device has, total and free ([`MemoryOps`]). The KV cache
//! budget defaults from it, and allocations are checked against it before they are made.
//!
//! - CPU backends (and wgpu on a CPU adapter such as Mesa lavapipe): the host's `MemTotal` /
//!   `MemAvailable`.
//! - wgpu on Vulkan: the device-local heap's size, and its free part from `VK_EXT_memory_budget`
//!   where the driver has it (budget − usage, which counts other processes' allocations); without
//!   the extension, free is the heap size less what Cinder's own allocator has reserved.
//! - CUDA: `cuMemGetInfo` on the device's primary context (the one Burn's CUDA runtime uses).
//! - Anything else (wgpu on Metal or DX12): unknown, and the budget falls back to a fixed default.

use burn::tensor::backend::Backend;

/// The device-memory query. One of the op groups that make up [`crate::InferenceBackend`].
pub trait MemoryOps: Backend {
    /// Total and free memory of the device; `None` where the API does not tell.
    fn device_memory(_device: &Self::Device) -> Option<DeviceMemory> {
        None
    }
}

/// A device's memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// all of it
    pub total: u64,
    /// what new allocations can still take
    pub free: u64,
}

/// The host's memory (Linux `/proc/meminfo`), if known.
pub fn host_memory() -> Option<DeviceMemory> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(DeviceMemory {
        total: field("MemTotal:")?,
        free: field("MemAvailable:")?,
    })
}

/// Refuses a store of `bytes` that the device's free memory cannot hold (before allocating, so a
/// budget too large for the device is an error at start-up, not an out-of-memory mid-request).
pub fn check_fits(
    bytes: usize,
    memory: Option<DeviceMemory>,
    kind: crate::BackendKind,
) -> Result<(), crate::BackendError> {
    match memory {
        Some(m) if bytes as u64 > m.free => Err(crate::BackendError::Layout(format!(
            "a KV store of {} MiB does not fit the {} MiB free on the {kind} device ({} MiB total)",
            bytes >> 20,
            m.free >> 20,
            m.total >> 20
        ))),
        _ => Ok(()),
    }
}

/// candle runs on the host.
#[allow(deprecated)] // burn-candle is deprecated upstream; still a backend users pick
#[cfg(feature = "candle")]
impl MemoryOps for crate::types::Candle {
    fn device_memory(_device: &Self::Device) -> Option<DeviceMemory> {
        host_memory()
    }
}

#[cfg(feature = "flex")]
impl MemoryOps for crate::types::Flex {
    fn device_memory(_device: &Self::Device) -> Option<DeviceMemory> {
        host_memory()
    }
}

#[cfg(feature = "ndarray")]
impl MemoryOps for crate::types::NdArray {
    fn device_memory(_device: &Self::Device) -> Option<DeviceMemory> {
        host_memory()
    }
}

#[cfg(feature = "wgpu")]
impl MemoryOps for crate::types::Wgpu {
    fn device_memory(device: &Self::Device) -> Option<DeviceMemory> {
        wgpu_memory(device)
    }
}

#[cfg(feature = "cuda")]
impl MemoryOps for crate::types::Cuda {
    fn device_memory(device: &Self::Device) -> Option<DeviceMemory> {
        cuda_memory(device)
    }
}

/// The memory of the adapter burn-wgpu runs `device` on.
#[cfg(feature = "wgpu")]
fn wgpu_memory(device: &burn_wgpu::WgpuDevice) -> Option<DeviceMemory> {
    use burn_wgpu::WgpuDevice as D;
    use wgpu_api::DeviceType as T;

    let instance = wgpu_api::Instance::new(wgpu_api::InstanceDescriptor {
        backends: wgpu_api::Backends::all(),
        ..wgpu_api::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = pollster_block_on(instance.enumerate_adapters(wgpu_api::Backends::all()));
    let of_type = |t: T| {
        adapters
            .iter()
            .filter(move |a| a.get_info().device_type == t)
    };
    // The adapter cubecl picks for each device kind: the n-th of a type, or the most capable.
    #[allow(deprecated)]
    let adapter = match device {
        D::DiscreteGpu(n) => of_type(T::DiscreteGpu).nth(*n),
        D::IntegratedGpu(n) => of_type(T::IntegratedGpu).nth(*n),
        D::VirtualGpu(n) => of_type(T::VirtualGpu).nth(*n),
        D::Cpu => of_type(T::Cpu).next(),
        _ => [
            T::DiscreteGpu,
            T::IntegratedGpu,
            T::VirtualGpu,
            T::Cpu,
            T::Other,
        ]
        .into_iter()
        .find_map(|t| of_type(t).next()),
    }?;
    let used_by_us = wgpu_reserved(device);
    let vulkan = vulkan_memory(adapter, used_by_us);
    if vulkan.is_some() {
        return vulkan;
    }
    // A CPU adapter allocates host memory.
    (adapter.get_info().device_type == T::Cpu)
        .then(host_memory)
        .flatten()
}

/// Bytes cubecl's allocator holds on `device` (0 before the device is first used).
#[cfg(feature = "wgpu")]
fn wgpu_reserved(device: &burn_wgpu::WgpuDevice) -> u64 {
    use burn_wgpu::WgpuRuntime;
    use cubecl::Runtime;
    WgpuRuntime::client(device)
        .memory_usage()
        .map_or(0, |u| u.bytes_reserved)
}

/// Device-local heap size and free bytes of a Vulkan adapter.
#[cfg(all(feature = "wgpu", not(target_os = "macos")))]
fn vulkan_memory(adapter: &wgpu_api::Adapter, used_by_us: u64) -> Option<DeviceMemory> {
    use ash::vk;
    // SAFETY: the hal adapter is only read (its instance and physical device handles, for two
    // property queries) while `adapter`, which owns it, is alive.
    let hal = unsafe { adapter.as_hal::<wgpu_api::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    let phys = hal.raw_physical_device();
    let has_budget = hal
        .physical_device_capabilities()
        .supports_extension(vk::EXT_MEMORY_BUDGET_NAME);
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let props = if has_budget {
        let mut p2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: `phys` belongs to `instance`; `p2` and its chained struct outlive the call.
        unsafe { instance.get_physical_device_memory_properties2(phys, &mut p2) };
        p2.memory_properties
    } else {
        // SAFETY: as above.
        unsafe { instance.get_physical_device_memory_properties(phys) }
    };
    let heaps = &props.memory_heaps[..props.memory_heap_count as usize];
    let i = heaps
        .iter()
        .position(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))?;
    let total = heaps[i].size;
    let free = if has_budget {
        budget.heap_budget[i].saturating_sub(budget.heap_usage[i])
    } else {
        total.saturating_sub(used_by_us)
    };
    Some(DeviceMemory {
        total,
        free: free.min(total),
    })
}

#[cfg(all(feature = "wgpu", target_os = "macos"))]
fn vulkan_memory(_adapter: &wgpu_api::Adapter, _used_by_us: u64) -> Option<DeviceMemory> {
    None
}

/// Runs a future that completes without waiting on anything (wgpu's native adapter enumeration).
#[cfg(feature = "wgpu")]
fn pollster_block_on<F: std::future::Future>(f: F) -> F::Output {
    cubecl::future::block_on(f)
}

/// Free and total memory of a CUDA device.
#[cfg(feature = "cuda")]
fn cuda_memory(device: &burn_cuda::CudaDevice) -> Option<DeviceMemory> {
    let ctx = match cudarc::driver::CudaContext::new(device.index) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("no CUDA context for device {}: {e}", device.index);
            return None;
        }
    };
    let (free, total) = ctx.mem_get_info().ok()?;
    Some(DeviceMemory {
        total: total as u64,
        free: free as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_read_and_consistent() {
        let m = host_memory().expect("/proc/meminfo on Linux");
        assert!(m.total > 0 && m.free <= m.total, "{m:?}");
    }

    #[test]
    fn a_store_larger_than_free_memory_is_refused_by_name() {
        let m = DeviceMemory {
            total: 8 << 30,
            free: 1 << 30,
        };
        assert!(check_fits(512 << 20, Some(m), crate::BackendKind::Wgpu).is_ok());
        let e = check_fits(2 << 30, Some(m), crate::BackendKind::Wgpu).unwrap_err();
        assert!(
            e.to_string()
                .contains("2048 MiB does not fit the 1024 MiB free on the wgpu device"),
            "{e}"
        );
        // Unknown memory: nothing to check against.
        assert!(check_fits(usize::MAX, None, crate::BackendKind::Cuda).is_ok());
    }
}
