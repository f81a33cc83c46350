//! Activation rounding (what quantized kernels see) is bit-identical on every compiled backend: the
//! conformance tests depend on it, and backends disagree on details like round-half behaviour.

mod common;

use burn::tensor::{Tensor, TensorData};
use cinder::gguf::GgmlType;
use cinder::prelude::*;
use cinder::runtime::quant::act::{ActQuant, round_half_away, round_to_f16};

/// ggml's `quantize_row_q8_0_ref` applied and dequantized on the host.
fn host_q8_0(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for b in x.chunks(32) {
        let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let dh = half::f16::from_f32(d).to_f32();
        out.extend(b.iter().map(|v| (v * id).round() * dh));
    }
    out
}

struct Check;

impl BackendTask for Check {
    type Output = ();
    fn run<B: Backend>(self, device: B::Device) {
        let (n, k) = (4usize, 512usize);
        let mut x: Vec<f32> = (0..n * k)
            .map(|i| ((i as f32) * 0.61).sin() * (1.0 + (i % 7) as f32))
            .collect();
        // exact ties after scaling: a block whose max is 127 maps x to x exactly
        x[..32]
            .iter_mut()
            .enumerate()
            .for_each(|(j, v)| *v = j as f32 + 0.5);
        x[0] = 127.0;
        let t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, k]), &device);
        let got: Vec<f32> = ActQuant::for_weight(GgmlType::Q4_0)
            .apply(t)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .expect("readback");
        let want = host_q8_0(&x);
        let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(
            bad.is_empty(),
            "{} mismatches, first at {:?}",
            bad.len(),
            bad.first().map(|&i| (x[i], got[i], want[i]))
        );

        let v = vec![0.5f32, 1.5, 2.5, -0.5, -2.5, 0.499_999_97, 126.5, -3.2, 0.0];
        let t = Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &device);
        let got: Vec<f32> = round_half_away(t)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .expect("readback");
        assert_eq!(got, v.iter().map(|x| x.round()).collect::<Vec<_>>());

        // f16 normal range only (see round_to_f16: subnormals keep 11 bits)
        let v: Vec<f32> = (1..500)
            .map(|i| (i as f32 * 0.377).sin() * 3.0 + 0.01)
            .filter(|v| v.abs() > 6.2e-5)
            .collect();
        let t = Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &device);
        let got: Vec<f32> = round_to_f16(t)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .expect("readback");
        for (a, g) in v.iter().zip(got) {
            assert_eq!(g, half::f16::from_f32(*a).to_f32(), "f16 rounding of {a}");
        }
    }
}

#[test]
fn activation_rounding_is_identical_on_every_backend() {
    for kind in common::test_backends() {
        eprintln!("activation rounding on {kind}");
        cinder::backends::dispatch(kind, Check).expect("backend");
    }
}
