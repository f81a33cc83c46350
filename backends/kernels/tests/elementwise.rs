//! The fused SwiGLU activation: within a few ulp of `x / (1 + e^-x) · u` in f64, the same on the
//! parallel path as on the short one.
use cinder_kernels::elementwise::silu_mul;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn ulps(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

#[test]
fn matches_the_reference_on_both_paths() {
    let mut rng = StdRng::seed_from_u64(3);
    // 20_003: past the parallel threshold; 37: the short path.
    for n in [37usize, 20_003] {
        let g: Vec<f32> = (0..n).map(|_| rng.random_range(-100.0f32..30.0)).collect();
        let u: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let mut out = g.clone();
        silu_mul(&mut out, &u);
        for i in 0..n {
            let (x, y) = (g[i] as f64, u[i] as f64);
            let want = (x / (1.0 + (-x).exp()) * y) as f32;
            assert!(
                ulps(out[i], want) <= 4 || (out[i] - want).abs() < 1e-30,
                "silu({x})·{y} = {} vs {want}",
                out[i]
            );
            // chunking never changes a value
            let mut one = [g[i]];
            silu_mul(&mut one, &u[i..=i]);
            assert_eq!(one[0].to_bits(), out[i].to_bits());
        }
    }
}
