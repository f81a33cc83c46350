//! Times each weight type's product on every instruction set this CPU has, against the portable
//! path, at SmolLM2-135M's shapes: `cargo run --release -p cinder-kernels --example isa_compare
//! [reps]`. One thread, so the ratio is the kernel's, not the thread pool's. Prints a Markdown table
//! (median over `reps`, µs per product).
//!
//! For an aarch64 CPU's numbers run it on one (under qemu-user the times are the emulator's).

use std::time::Instant;

use cinder_gguf::GgmlType;
use cinder_kernels::{Isa, Packed, Weights, matmul_packed_with, matmul_with};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Deterministic pseudo-random values in -1..1 (no rand dependency outside tests).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reps: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(15);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_available()).collect();
    println!(
        "kernels: {} · 1 thread · median of {reps}",
        cinder_kernels::describe()
    );
    print!("| type | n×k | m |");
    for i in &isas {
        print!(" {} µs |", i.name());
    }
    println!(" ratio |");
    println!("|---|---|---|{}---|", "---|".repeat(isas.len()));
    // (type, n, k): attention/FFN projections and the output head of SmolLM2-135M.
    let shapes = [
        (GgmlType::Q4_1, 576, 576),
        (GgmlType::Q4_0, 1536, 576),
        (GgmlType::Q8_0, 1536, 576),
        (GgmlType::Q5_0, 576, 576),
        (GgmlType::Q4_K, 576, 1536),
        (GgmlType::Q6_K, 576, 1536),
        (GgmlType::F16, 576, 576),
        (GgmlType::F32, 576, 576),
    ];
    for (ty, n, k) in shapes {
        let data = cinder_gguf::quantize::quantize(ty, &values(n * k, 1), k)?;
        let w = Weights {
            ty,
            data: &data,
            n,
            k,
        };
        let packed = Packed::new(w)?;
        for m in [1usize, 16] {
            let x = values(m * k, 2);
            let mut y = vec![0.0f32; m * n];
            let mut times = Vec::new();
            for &isa in &isas {
                let mut run = || match &packed {
                    Some(p) => matmul_packed_with(isa, p, &x, m, &mut y),
                    None => matmul_with(isa, w, &x, m, &mut y),
                };
                pool.install(&mut run)?;
                let mut t = Vec::with_capacity(reps);
                for _ in 0..reps {
                    let start = Instant::now();
                    pool.install(&mut run)?;
                    t.push(start.elapsed().as_secs_f64() * 1e6);
                }
                times.push(median(t));
            }
            print!("| {} | {n}×{k} | {m} |", ty.name());
            for t in &times {
                print!(" {t:.1} |");
            }
            let best = times.iter().skip(1).cloned().fold(f64::INFINITY, f64::min);
            println!(" {:.2}× |", times[0] / best);
        }
    }
    Ok(())
}
