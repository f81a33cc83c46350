use cinder_gguf::GgmlType;
use cinder_kernels::{Isa, Weights, matmul_with, row_bytes};
use std::time::Instant;
fn main() {
    let (n, k) = (1536usize, 576usize);
    let ty = GgmlType::Q4_1;
    let rb = row_bytes(ty, k).unwrap();
    let mut data = vec![0x33u8; rb * n];
    for b in data.chunks_exact_mut(20) {
        b[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&0u16.to_le_bytes());
    }
    let x: Vec<f32> = (0..k).map(|i| (i as f32).sin()).collect();
    let mut y = vec![0.0; n];
    let w = Weights {
        ty,
        data: &data,
        n,
        k,
    };
    for isa in [Isa::Avx2, Isa::Scalar] {
        let t = Instant::now();
        let reps = 2000;
        for _ in 0..reps {
            matmul_with(isa, w, &x, 1, &mut y).unwrap();
        }
        let dt = t.elapsed().as_secs_f64() / reps as f64;
        println!(
            "{:?}: {:.1} us/matvec, {:.2} GB/s",
            isa,
            dt * 1e6,
            (rb * n) as f64 / dt / 1e9
        );
    }
}
