//! The CubeCL kernels (wgpu; Mesa lavapipe on machines without a GPU) against the CPU path (flex),
//! op by op, on shapes that reach every branch: partial cubes and tiles, lane striding, chunks of
//! several weights in one launch, ragged attention batches with windows, soft-capping, GQA and
//! contexts long enough to split.
//!
//! Tolerances (the arithmetic is float on both sides, summed in other orders):
//! - products: within 1e-4 of the largest `Σ|x·w|` term of the layer, relative (the CPU kernels sum
//!   integer products exactly, the GPU sums float products);
//! - norms, RoPE, gates: 2e-6 relative (1 ulp to a few), GEGLU one f16 step;
//! - attention: 2e-3 absolute on outputs of magnitude ~1 (the CPU kernel rounds the normalized
//!   probabilities to f16 before the product with V; the GPU's online softmax keeps them f32);
//! - argmax: exact.
//!
//! Runs where wgpu is compiled in (CI's backend pass).

#[cfg(all(feature = "wgpu", feature = "flex"))]
mod gpu {
    use burn::tensor::{Int, Tensor, TensorData};
    use cinder::backends::attention::{AttentionParams, KvShape, PagedBatch, SeqSlice};
    use cinder::backends::fused::{Glu, RopeStyle};
    use cinder::backends::types::{Flex, Wgpu};
    use cinder::backends::{FusedOps, KvOps, QWeight, QuantOps, SampleOps};
    use cinder::gguf::{GgmlType, SharedBytes};

    type Dev<B> = burn::tensor::Device<B>;

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761);
                (h % 20_001) as f32 / 10_000.0 - 1.0
            })
            .collect()
    }

    fn t2<B: burn::tensor::backend::Backend>(
        v: Vec<f32>,
        s: [usize; 2],
        d: &Dev<B>,
    ) -> Tensor<B, 2> {
        Tensor::from_data(TensorData::new(v, s), d)
    }

    fn t4<B: burn::tensor::backend::Backend>(
        v: Vec<f32>,
        s: [usize; 4],
        d: &Dev<B>,
    ) -> Tensor<B, 4> {
        Tensor::from_data(TensorData::new(v, s), d)
    }

    fn host<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().to_vec().expect("readback")
    }

    fn close(what: &str, got: &[f32], want: &[f32], tol: impl Fn(usize) -> f32) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        let bad: Vec<usize> = (0..got.len())
            .filter(|&i| {
                // a NaN on either side is a mismatch
                let d = (got[i] - want[i]).abs();
                d.is_nan() || d > tol(i)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {} of {} off, first {:?}",
            bad.len(),
            got.len(),
            bad.first().map(|&i| (i, got[i], want[i], tol(i)))
        );
    }

    /// A weight of `n × k` in `ty`, quantized from smooth values by ggml's reference quantizers.
    fn weight(ty: GgmlType, n: usize, k: usize, seed: u32) -> (QWeight, Vec<f32>) {
        let x: Vec<f32> = vals(n * k, seed).iter().map(|v| v * 0.5).collect();
        let data = match ty {
            GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => cinder::gguf::quantize::quantize(ty, &x, k).expect("quantize"),
        };
        let w = QWeight {
            ty,
            n,
            k,
            data: SharedBytes::from_vec(data),
        };
        let deq = w.dequantize("w").expect("dequantize");
        (w, deq)
    }

    /// Per output, the tolerance of a product: 1e-4 of `Σ|x·w|` (the scale the float sums work at).
    fn product_tol(x: &[f32], deq: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut t = vec![0.0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                let s: f32 = (0..k).map(|j| (x[r * k + j] * deq[c * k + j]).abs()).sum();
                t[r * n + c] = 1e-4 * s.max(1e-3);
            }
        }
        t
    }

    const TYPES: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// A quantized KV cache runs on the CPU backends; the wgpu store refuses one by name.
    #[test]
    fn a_quantized_kv_cache_is_refused_on_wgpu() {
        use cinder::backends::attention::KvType;
        let gd: Dev<Wgpu> = Default::default();
        for dtype in [KvType::Q8_0, KvType::Q4_0] {
            let shape = KvShape {
                blocks: 4,
                block_size: 16,
                kv_heads: 2,
                head_dim: 64,
                dtype,
            };
            let e = Wgpu::kv_alloc(shape, &gd).expect_err("a quantized wgpu store");
            let e = e.to_string();
            assert!(
                e.contains(dtype.name()) && e.contains("CPU backends"),
                "{e}"
            );
        }
    }

    #[test]
    fn quantized_products_match_the_cpu_kernels() {
        let (cd, gd): (Dev<Flex>, Dev<Wgpu>) = (Default::default(), Default::default());
        for (s, ty) in TYPES.into_iter().enumerate() {
            let k_quant = matches!(
                ty,
                GgmlType::Q2_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K
            );
            // 288 = 9 blocks of 32: lanes with one block and lanes with none; K-quants 2·256.
            let k = if k_quant { 512 } else { 288 };
            let n = 75; // not a multiple of 8 (matvec cubes) nor of 64 (tiles)
            let (w, deq) = weight(ty, n, k, s as u32 + 1);
            let cw = Flex::qw_prepare("w", w.clone(), &cd).expect("flex weight");
            let gw = Wgpu::qw_prepare("w", w, &gd).expect("wgpu weight");
            for m in [1usize, 2, 8, 9, 70] {
                let x = vals(m * k, 100 + m as u32);
                let want = host(Flex::qw_matmul(t2(x.clone(), [m, k], &cd), &cw));
                let got = host(Wgpu::qw_matmul(t2(x.clone(), [m, k], &gd), &gw));
                let tol = product_tol(&x, &deq, m, n, k);
                close(&format!("{} m={m}", ty.name()), &got, &want, |i| tol[i]);
            }
            // Embedding rows: the dequantized values (a fused multiply-add may move the last bit).
            let ids =
                Tensor::<Wgpu, 1, Int>::from_data(TensorData::new(vec![0i32, 74, 7], [3]), &gd);
            let rows = host(Wgpu::qw_rows(&gw, ids));
            let want: Vec<f32> = [0usize, 74, 7]
                .iter()
                .flat_map(|&r| deq[r * k..(r + 1) * k].to_vec())
                .collect();
            close(&format!("{} rows", ty.name()), &rows, &want, |i| {
                want[i].abs() * 2e-7
            });
        }
    }

    #[test]
    fn weights_sharing_a_launch_and_fused_gates_match() {
        let (cd, gd): (Dev<Flex>, Dev<Wgpu>) = (Default::default(), Default::default());
        let k = 576;
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
            // A layer's Q, K, V: 3 weights of different heights in one launch.
            let ws: Vec<(QWeight, Vec<f32>)> = [96usize, 40, 40]
                .iter()
                .enumerate()
                .map(|(i, &n)| weight(ty, n, k, 7 + i as u32))
                .collect();
            let cws: Vec<_> = ws
                .iter()
                .map(|(w, _)| Flex::qw_prepare("w", w.clone(), &cd).expect("flex"))
                .collect();
            let gws: Vec<_> = ws
                .iter()
                .map(|(w, _)| Wgpu::qw_prepare("w", w.clone(), &gd).expect("wgpu"))
                .collect();
            for m in [1usize, 5, 12] {
                let x = vals(m * k, 3);
                let want = Flex::qw_matmul_many(
                    t2(x.clone(), [m, k], &cd),
                    &cws.iter().collect::<Vec<_>>(),
                );
                let got = Wgpu::qw_matmul_many(
                    t2(x.clone(), [m, k], &gd),
                    &gws.iter().collect::<Vec<_>>(),
                );
                for (i, (g, w)) in got.into_iter().zip(want).enumerate() {
                    let n = ws[i].0.n;
                    let tol = product_tol(&x, &ws[i].1, m, n, k);
                    close(
                        &format!("{} many {i} m={m}", ty.name()),
                        &host(g),
                        &host(w),
                        |j| tol[j],
                    );
                }
            }
            // Gate and up with SwiGLU / GEGLU: fused (m ≤ 8) and composed (m > 8).
            let (gate, gdeq) = weight(ty, 130, k, 21);
            let (up, udeq) = weight(ty, 130, k, 22);
            let (cg, cu) = (
                Flex::qw_prepare("g", gate.clone(), &cd).expect("flex"),
                Flex::qw_prepare("u", up.clone(), &cd).expect("flex"),
            );
            let (gg, gu) = (
                Wgpu::qw_prepare("g", gate, &gd).expect("wgpu"),
                Wgpu::qw_prepare("u", up, &gd).expect("wgpu"),
            );
            for kind in [Glu::Silu, Glu::Gelu] {
                for m in [1usize, 8, 11] {
                    let x = vals(m * k, 5);
                    let want = host(Flex::glu_matmul(t2(x.clone(), [m, k], &cd), &cg, &cu, kind));
                    let got = host(Wgpu::glu_matmul(t2(x.clone(), [m, k], &gd), &gg, &gu, kind));
                    // The gate's inputs carry the products' tolerances (see products), through
                    // the gate's slopes (|d/dg| ≤ ~1.1·|u|, |d/du| ≤ |g|); GEGLU also rounds
                    // through f16 (2^-9 of the value).
                    let mut pg =
                        Flex::qw_matmul_many(t2(x.clone(), [m, k], &cd), &[&cg, &cu]).into_iter();
                    let (g, u) = (host(pg.next().expect("g")), host(pg.next().expect("u")));
                    let (tg, tu) = (
                        product_tol(&x, &gdeq, m, 130, k),
                        product_tol(&x, &udeq, m, 130, k),
                    );
                    close(&format!("{} {kind:?} m={m}", ty.name()), &got, &want, |i| {
                        2.0 * (tg[i] * u[i].abs() + tu[i] * g[i].abs().max(1.0))
                            + want[i].abs() * 2f32.powi(-9)
                            + 1e-6
                    });
                }
            }
        }
    }

    #[test]
    fn norms_rope_and_gates_match() {
        let (cd, gd): (Dev<Flex>, Dev<Wgpu>) = (Default::default(), Default::default());
        let (rows, d) = (7usize, 576usize);
        let x = vals(rows * d, 1);
        let r = vals(rows * d, 2);
        let w: Vec<f32> = vals(d, 3).iter().map(|v| 1.0 + v * 0.1).collect();
        let w1 = |v: Vec<f32>| v;
        let (cs, cn) = Flex::add_rms_norm(
            t2(x.clone(), [rows, d], &cd),
            Some(t2(r.clone(), [rows, d], &cd)),
            Tensor::from_data(TensorData::new(w1(w.clone()), [d]), &cd),
            1e-5,
        );
        let (gs, gn) = Wgpu::add_rms_norm(
            t2(x.clone(), [rows, d], &gd),
            Some(t2(r.clone(), [rows, d], &gd)),
            Tensor::from_data(TensorData::new(w.clone(), [d]), &gd),
            1e-5,
        );
        close("add", &host(gs), &host(cs), |_| 0.0);
        let cn = host(cn);
        close("add_rms_norm", &host(gn), &cn, |i| {
            cn[i].abs() * 2e-6 + 1e-7
        });
        let cn = host(Flex::rms_norm(
            t2(x.clone(), [rows, d], &cd),
            Tensor::from_data(TensorData::new(w.clone(), [d]), &cd),
            1e-6,
        ));
        let gn = host(Wgpu::rms_norm(
            t2(x.clone(), [rows, d], &gd),
            Tensor::from_data(TensorData::new(w.clone(), [d]), &gd),
            1e-6,
        ));
        close("rms_norm", &gn, &cn, |i| cn[i].abs() * 2e-6 + 1e-7);
        // RoPE of Q and K, both pairings, a partial rotation (n_rot < hd).
        let (t, h, kvh, hd) = (5usize, 6usize, 2usize, 64usize);
        for (style, n_rot) in [(RopeStyle::Interleaved, 64), (RopeStyle::Neox, 32)] {
            let q = vals(t * h * hd, 4);
            let k = vals(t * kvh * hd, 5);
            let cos: Vec<f32> = vals(t * hd, 6).iter().map(|v| v.abs()).collect();
            let sin = vals(t * hd, 7);
            let (cq, ck) = Flex::rope_pair(
                t4(q.clone(), [1, t, h, hd], &cd),
                t4(k.clone(), [1, t, kvh, hd], &cd),
                t2(cos.clone(), [t, hd], &cd),
                t2(sin.clone(), [t, hd], &cd),
                style,
                n_rot,
            );
            let (gq, gk) = Wgpu::rope_pair(
                t4(q, [1, t, h, hd], &gd),
                t4(k, [1, t, kvh, hd], &gd),
                t2(cos, [t, hd], &gd),
                t2(sin, [t, hd], &gd),
                style,
                n_rot,
            );
            let (cq, ck) = (host(cq), host(ck));
            close("rope q", &host(gq), &cq, |i| cq[i].abs() * 2e-6 + 1e-7);
            close("rope k", &host(gk), &ck, |i| ck[i].abs() * 2e-6 + 1e-7);
        }
        // Gemma's post-norm of the residual fused with the add and the next norm.
        let wt = |v: &[f32], d: &Dev<Wgpu>| {
            Tensor::<Wgpu, 1>::from_data(TensorData::new(v.to_vec(), [v.len()]), d)
        };
        let wc =
            |v: &[f32]| Tensor::<Flex, 1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &cd);
        let rw: Vec<f32> = vals(d, 10).iter().map(|v| 1.0 + v * 0.3).collect();
        let (cs, cn) = Flex::post_norm_add_rms_norm(
            t2(x.clone(), [rows, d], &cd),
            t2(r.clone(), [rows, d], &cd),
            wc(&rw),
            wc(&w),
            1e-6,
        );
        let (gs, gn) = Wgpu::post_norm_add_rms_norm(
            t2(x.clone(), [rows, d], &gd),
            t2(r.clone(), [rows, d], &gd),
            wt(&rw, &gd),
            wt(&w, &gd),
            1e-6,
        );
        let (cs, cn) = (host(cs), host(cn));
        close("post-norm add", &host(gs), &cs, |i| {
            cs[i].abs() * 4e-6 + 1e-6
        });
        close("post-norm add norm", &host(gn), &cn, |i| {
            cn[i].abs() * 4e-6 + 1e-6
        });
        // QK-norm + RoPE, head sizes below, at and above the kernel's units per head.
        for (hd, style, n_rot) in [
            (32usize, RopeStyle::Neox, 32),
            (64, RopeStyle::Interleaved, 64),
            (256, RopeStyle::Neox, 128),
        ] {
            let (t, h, kvh) = (3usize, 4usize, 1usize);
            let q = vals(t * h * hd, 11);
            let k: Vec<f32> = vals(t * kvh * hd, 12).iter().map(|v| v * 30.0).collect();
            let qw: Vec<f32> = vals(hd, 13).iter().map(|v| 1.0 + v).collect();
            let kw: Vec<f32> = vals(hd, 14).iter().map(|v| 0.5 + v).collect();
            let cos: Vec<f32> = vals(t * hd, 15).iter().map(|v| v.abs()).collect();
            let sin = vals(t * hd, 16);
            let (cq, ck) = Flex::norm_rope_pair(
                t4(q.clone(), [1, t, h, hd], &cd),
                t4(k.clone(), [1, t, kvh, hd], &cd),
                wc(&qw),
                wc(&kw),
                1e-6,
                t2(cos.clone(), [t, hd], &cd),
                t2(sin.clone(), [t, hd], &cd),
                style,
                n_rot,
            );
            let (gq, gk) = Wgpu::norm_rope_pair(
                t4(q, [1, t, h, hd], &gd),
                t4(k, [1, t, kvh, hd], &gd),
                wt(&qw, &gd),
                wt(&kw, &gd),
                1e-6,
                t2(cos, [t, hd], &gd),
                t2(sin, [t, hd], &gd),
                style,
                n_rot,
            );
            let (cq, ck) = (host(cq), host(ck));
            // |a·c + b·s| can cancel: the bound is on the terms' size (|q| after the norm ~ 1-2).
            close("norm+rope q", &host(gq), &cq, |_| 2e-5);
            close("norm+rope k", &host(gk), &ck, |_| 2e-5);
        }
        let g = vals(999, 8).iter().map(|v| v * 12.0).collect::<Vec<_>>();
        let u = vals(999, 9);
        let one =
            |v: Vec<f32>, d: &Dev<Wgpu>| Tensor::<Wgpu, 1>::from_data(TensorData::new(v, [999]), d);
        let onec = |v: Vec<f32>| Tensor::<Flex, 1>::from_data(TensorData::new(v, [999]), &cd);
        let want = host(Flex::silu_mul(onec(g.clone()), onec(u.clone())));
        let got = host(Wgpu::silu_mul(one(g.clone(), &gd), one(u.clone(), &gd)));
        close("silu", &got, &want, |i| want[i].abs() * 2e-6 + 1e-7);
        let want = host(Flex::gelu_mul(onec(g.clone()), onec(u.clone())));
        let got = host(Wgpu::gelu_mul(one(g, &gd), one(u, &gd)));
        close("gelu", &got, &want, |i| {
            want[i].abs() * 2f32.powi(-10) + 1e-6
        });
    }

    /// A ragged batch: (past, new) per sequence, block tables out of order.
    fn batch(lens: &[(usize, usize)], bs: usize) -> PagedBatch {
        let mut next = 0u32;
        let mut row = 0;
        let seqs = lens
            .iter()
            .map(|&(past, new)| {
                let blocks: Vec<u32> = (0..(past + new).div_ceil(bs))
                    .map(|i| {
                        next += 1;
                        // interleave: block ids jump around the store
                        (next * 7 + i as u32 * 3) % 997
                    })
                    .collect();
                let s = SeqSlice {
                    q_start: row,
                    q_len: new,
                    past,
                    blocks,
                };
                row += new;
                s
            })
            .collect();
        PagedBatch {
            block_size: bs,
            seqs,
        }
    }

    /// Runs the same attention steps on both backends: every sequence's `past` tokens first (as
    /// one prefill step), then the new rows of `lens`; compares the second step's outputs.
    fn attention_case(
        lens: &[(usize, usize)],
        h: usize,
        kvh: usize,
        hd: usize,
        params: AttentionParams,
    ) {
        let (cd, gd): (Dev<Flex>, Dev<Wgpu>) = (Default::default(), Default::default());
        let bs = 16;
        let shape = KvShape {
            blocks: 1000,
            block_size: bs,
            kv_heads: kvh,
            head_dim: hd,
            dtype: Default::default(),
        };
        let mut ckv = Flex::kv_alloc(shape, &cd).expect("flex store");
        let mut gkv = Wgpu::kv_alloc(shape, &gd).expect("wgpu store");
        let full = batch(lens, bs);
        let first = PagedBatch {
            block_size: bs,
            seqs: {
                let mut row = 0;
                full.seqs
                    .iter()
                    .filter(|s| s.past > 0)
                    .map(|s| {
                        let f = SeqSlice {
                            q_start: row,
                            q_len: s.past,
                            past: 0,
                            blocks: s.blocks.clone(),
                        };
                        row += s.past;
                        f
                    })
                    .collect()
            },
        };
        let mut outs = Vec::new();
        for (step, b) in [first, full].into_iter().enumerate() {
            let t = b.rows();
            if t == 0 {
                continue;
            }
            let (q, k, v) = (
                vals(t * h * hd, 10 + step as u32),
                vals(t * kvh * hd, 20 + step as u32),
                vals(t * kvh * hd, 30 + step as u32),
            );
            // The models' layout: [1, T, heads, hd] buffers seen as [1, heads, T, hd].
            let c = Flex::paged_attention(
                &mut ckv,
                t4(q.clone(), [1, t, h, hd], &cd).swap_dims(1, 2),
                t4(k.clone(), [1, t, kvh, hd], &cd).swap_dims(1, 2),
                t4(v.clone(), [1, t, kvh, hd], &cd).swap_dims(1, 2),
                &b,
                &Flex::kv_step(&b, &cd),
                &params,
            );
            let g = Wgpu::paged_attention(
                &mut gkv,
                t4(q, [1, t, h, hd], &gd).swap_dims(1, 2),
                t4(k, [1, t, kvh, hd], &gd).swap_dims(1, 2),
                t4(v, [1, t, kvh, hd], &gd).swap_dims(1, 2),
                &b,
                &Wgpu::kv_step(&b, &gd),
                &params,
            );
            outs.push((host(g.swap_dims(1, 2)), host(c.swap_dims(1, 2))));
        }
        for (i, (g, c)) in outs.iter().enumerate() {
            close(
                &format!("attention {lens:?} h{h}/{kvh} hd{hd} {params:?} step {i}"),
                g,
                c,
                |_| 2e-3,
            );
        }
    }

    #[test]
    fn paged_attention_matches_the_cpu_kernel() {
        let plain = AttentionParams {
            scale: 0.125,
            sliding_window: None,
            softcap: None,
        };
        // Decode rows after prompts of several lengths, a prefill chunk continuing a prefix, a
        // fresh prompt; GQA 6/2 and 9/3 (SmolLM2's), head widths 64 and 256 (Gemma's).
        attention_case(&[(20, 1), (3, 1), (40, 7), (0, 11)], 6, 2, 64, plain);
        attention_case(&[(33, 1), (0, 5)], 9, 3, 64, plain);
        attention_case(&[(17, 2), (0, 3)], 4, 1, 256, plain);
        // Sliding window and soft-capping.
        attention_case(
            &[(50, 1), (30, 9)],
            6,
            2,
            64,
            AttentionParams {
                scale: 0.125,
                sliding_window: Some(24),
                softcap: Some(20.0),
            },
        );
        // Long contexts, few rows: keys split among cubes and merged.
        attention_case(&[(1500, 1)], 6, 2, 64, plain);
        attention_case(
            &[(1300, 2), (700, 1)],
            4,
            1,
            64,
            AttentionParams {
                scale: 0.125,
                sliding_window: Some(1000),
                softcap: None,
            },
        );
    }

    #[test]
    fn argmax_reads_back_the_cpu_argmax() {
        let (cd, gd): (Dev<Flex>, Dev<Wgpu>) = (Default::default(), Default::default());
        let (n, vocab) = (5usize, 49152usize);
        let x = vals(n * vocab, 77);
        let want = Flex::argmax_rows(t2(x.clone(), [n, vocab], &cd)).expect("flex");
        let got = Wgpu::argmax_rows(t2(x, [n, vocab], &gd)).expect("wgpu");
        assert_eq!(got, want);
    }
}
