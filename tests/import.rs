//! Records (`cinder import`): GGUF -> record -> load gives bit-identical logits; an HF SafeTensors
//! checkpoint written from the SmolLM2 GGUF (dequantized, HF names, HF RoPE layout, sharded) gives
//! the GGUF's greedy tokens directly and through a record; tampering with any output file or with
//! the manifest is refused; pickle is refused; bad SafeTensors headers give errors, not panics.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cinder::importer::{ImportOptions, LoadedModel, import, load_model};
use cinder::prelude::*;
use cinder::runtime::attention::ContiguousKvCache;
use cinder::runtime::generate::prefill;
use common::hf::{write_f32_gguf, write_hf_from_gguf};
use common::{NEAR_TIE, model_path, near_tie_pick};
use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;

fn on_cpu<T: BackendTask>(t: T) -> T::Output {
    cinder::backends::dispatch(common::primary_backend(), t).expect("backend compiled")
}

/// First-position logits and `n` greedy tokens after `ids`.
fn greedy<B: InferenceBackend>(m: &LoadedModel<B>, ids: &[u32], n: usize) -> (Vec<f32>, Vec<u32>) {
    let mut cache = ContiguousKvCache::<B>::new(m.model.n_layers(), 256);
    let mut logits = prefill(&m.model, &mut cache, ids).expect("prefill");
    let first = logits.clone();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .expect("logits");
        out.push(t);
        logits = prefill(&m.model, &mut cache, &[t]).expect("decode");
    }
    (first, out)
}

/// Greedy steps compared up to the reference's own near-ties.
const NEAR_TIE_STEPS: usize = 16;

/// `cand`'s greedy choices along `reference`'s greedy path after `ids` (teacher-forced, so one
/// fork does not derail the rest): where they differ, `cand`'s pick must be within the reference's
/// own near-tie of the reference's (0.03 in probability or 0.2 in logit).
fn same_up_to_near_ties<B: InferenceBackend>(
    reference: &LoadedModel<B>,
    cand: &LoadedModel<B>,
    ids: &[u32],
) {
    let mut rc = ContiguousKvCache::<B>::new(reference.model.n_layers(), 256);
    let mut cc = ContiguousKvCache::<B>::new(cand.model.n_layers(), 256);
    let mut r = prefill(&reference.model, &mut rc, ids).expect("prefill");
    let mut c = prefill(&cand.model, &mut cc, ids).expect("prefill");
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i)
    };
    let mut forks = 0;
    for step in 0..NEAR_TIE_STEPS {
        let (rt, ct) = (argmax(&r), argmax(&c));
        match near_tie_pick(&r, ct, NEAR_TIE) {
            Ok(None) => {}
            Ok(Some(_)) => forks += 1,
            Err(e) => panic!("step {step}: the candidate {e} (the reference's)"),
        }
        r = prefill(&reference.model, &mut rc, &[rt as u32]).expect("decode");
        c = prefill(&cand.model, &mut cc, &[rt as u32]).expect("decode");
    }
    eprintln!("{forks} of {NEAR_TIE_STEPS} greedy steps differ, each at a reference near-tie");
}

const PROMPT: &str = "The three primary colors are";

struct RoundTrip {
    model: &'static str,
    dir: PathBuf,
}

impl BackendTask for RoundTrip {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let src = model_path(self.model);
        let m = import::<B>(&src, &self.dir, &ImportOptions::default(), &device).expect("import");
        assert!(m.files.iter().any(|f| f.path == "model.bpk"));
        assert_eq!(m.source.files.len(), 1);
        assert_eq!(
            m.source.files[0].sha256,
            cinder::catalog::sha256_file(&src).expect("sha")
        );
        let g = cinder::importer::load_model::<B>(&src, &device).expect("gguf");
        let r = load_model::<B>(&self.dir, &device).expect("record loads");
        // The same tokenizer (rebuilt from the GGUF's own metadata).
        let ids = g.tokenizer.encode(PROMPT, true).expect("encode");
        assert_eq!(r.tokenizer.encode(PROMPT, true).expect("encode"), ids);
        let (lg, tg) = greedy(&g, &ids, 8);
        let (lr, tr) = greedy(&r, &ids, 8);
        assert_eq!(tg, tr);
        assert!(
            lg.iter().zip(&lr).all(|(a, b)| a.to_bits() == b.to_bits()),
            "logits differ bit-wise"
        );
        assert_eq!(r.info.n_params, g.info.n_params);
        assert_eq!(r.info.type_histogram, g.info.type_histogram);
    }
}

#[test]
fn gguf_records_give_bit_identical_logits() {
    for model in ["smollm2-135m", "gemma3-270m"] {
        let tmp = tempfile::tempdir().expect("tmp");
        on_cpu(RoundTrip {
            model,
            dir: tmp.path().join("rec"),
        });
    }
}

/// Imports SmolLM2 once (shared by the tamper checks).
struct ImportOnce(PathBuf);

impl BackendTask for ImportOnce {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        import::<B>(
            &model_path("smollm2-135m"),
            &self.0,
            &ImportOptions::default(),
            &device,
        )
        .expect("import");
    }
}

struct Load(PathBuf);

impl BackendTask for Load {
    type Output = Result<(), String>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<(), String> {
        load_model::<B>(&self.0, &device)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn flip_byte(path: &Path, at: usize) {
    let mut b = std::fs::read(path).expect("read");
    let i = at.min(b.len() - 1);
    b[i] ^= 0x01;
    std::fs::write(path, b).expect("write");
}

#[test]
fn tampered_records_and_unsafe_sources_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = tmp.path().join("good");
    on_cpu(ImportOnce(good.clone()));
    on_cpu(Load(good.clone())).expect("the untouched record loads");

    // One byte of each output file, and of the manifest itself.
    for (file, at, needle) in [
        ("model.bpk", 5_000_000, "model.bpk"),
        ("model.bpk", 3, "model.bpk"),
        ("config.json", 20, "config.json"),
        ("tokenizer.gguf", 100, "tokenizer.gguf"),
        ("tokenizer.json", 100, "tokenizer.json"),
        ("manifest.json", 60, "manifest"),
    ] {
        let dir = tmp.path().join(format!("bad-{file}-{at}"));
        copy_dir(&good, &dir);
        flip_byte(&dir.join(file), at);
        let err = on_cpu(Load(dir)).expect_err(&format!("a changed {file} is refused"));
        assert!(err.contains(needle), "{file}: {err}");
    }
    // A file removed, and a record whose manifest claims another format version.
    let dir = tmp.path().join("missing");
    copy_dir(&good, &dir);
    std::fs::remove_file(dir.join("config.json")).expect("rm");
    let err = on_cpu(Load(dir)).expect_err("missing file");
    assert!(err.contains("config.json"), "{err}");

    // A pinned source with another hash is refused before anything is written.
    struct Pinned(PathBuf);
    impl BackendTask for Pinned {
        type Output = String;
        fn run<B: InferenceBackend>(self, device: B::Device) -> String {
            let opts = ImportOptions {
                expect_sha256: vec!["0".repeat(64)],
                ..Default::default()
            };
            import::<B>(&model_path("smollm2-135m"), &self.0, &opts, &device)
                .expect_err("pin mismatch")
                .to_string()
        }
    }
    let out = tmp.path().join("pinned");
    let err = on_cpu(Pinned(out.clone()));
    assert!(err.contains("--expect-sha256"), "{err}");
    assert!(!out.exists(), "nothing written");

    // Pickle checkpoints: refused by name, whatever their content.
    struct Pickle(PathBuf);
    impl BackendTask for Pickle {
        type Output = String;
        fn run<B: InferenceBackend>(self, device: B::Device) -> String {
            import::<B>(
                &self.0,
                &self.0.with_extension("out"),
                &ImportOptions::default(),
                &device,
            )
            .expect_err("pickle")
            .to_string()
        }
    }
    for name in ["pytorch_model.bin", "model.pt", "weights.ckpt"] {
        let p = tmp.path().join(name);
        std::fs::write(&p, b"\x80\x02}q\x00.").expect("write");
        let err = on_cpu(Pickle(p));
        assert!(
            err.contains("pickle") && err.contains("SafeTensors"),
            "{err}"
        );
    }
}

// ---- HF SafeTensors ---------------------------------------------------------------------------

struct HfCheck {
    f32_gguf: PathBuf,
    hf: PathBuf,
    rec: PathBuf,
}

impl BackendTask for HfCheck {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let g = cinder::importer::load_model::<B>(&self.f32_gguf, &device).expect("gguf");
        let ids = g.tokenizer.encode(PROMPT, true).expect("encode");
        let (lg, want) = greedy(&g, &ids, 16);
        let h = load_model::<B>(&self.hf, &device).expect("HF checkpoint loads directly");
        assert_eq!(
            h.tokenizer.encode(PROMPT, true).expect("encode"),
            ids,
            "tokenizer.json"
        );
        let (lh, th) = greedy(&h, &ids, 16);
        assert_eq!(th, want, "HF checkpoint vs GGUF greedy tokens");
        assert!(
            lg.iter().zip(&lh).all(|(a, b)| a.to_bits() == b.to_bits()),
            "HF checkpoint and GGUF of the same weights differ"
        );
        // The shipped Q4_1 file (Q4_1 kernels with 8-bit activations) against the F32 one: the
        // same greedy choices but at the F32 model's own near-ties.
        let q4 =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("gguf");
        same_up_to_near_ties(&g, &q4, &ids);

        let m = import::<B>(&self.hf, &self.rec, &ImportOptions::default(), &device)
            .expect("import HF");
        assert_eq!(m.source.kind, "safetensors");
        assert_eq!(
            m.source.files.len(),
            6,
            "config, index, 2 shards, 2 tokenizer files"
        );
        let r = load_model::<B>(&self.rec, &device).expect("record loads");
        let (lr, tr) = greedy(&r, &ids, 16);
        assert_eq!(tr, want);
        assert!(
            lh.iter().zip(&lr).all(|(a, b)| a.to_bits() == b.to_bits()),
            "record of the HF checkpoint differs from the checkpoint"
        );
        // Quantized on import: Q8_0 blocks, still the same greedy tokens on this prompt.
        let q = self.rec.with_extension("q8");
        let opts = ImportOptions {
            quantize: Some(cinder::gguf::GgmlType::Q8_0),
            ..Default::default()
        };
        let mq = import::<B>(&self.hf, &q, &opts, &device).expect("import q8_0");
        assert_eq!(mq.quantized_on_import.as_deref(), Some("Q8_0"));
        assert!(mq.tensors.iter().any(|t| t.ty == "Q8_0"));
        let rq = load_model::<B>(&q, &device).expect("q8_0 record loads");
        same_up_to_near_ties(&h, &rq, &ids);
    }
}

#[test]
fn hf_safetensors_checkpoints_match_the_gguf() {
    let tmp = tempfile::tempdir().expect("tmp");
    let f32_gguf = tmp.path().join("smollm2-f32.gguf");
    write_f32_gguf(&model_path("smollm2-135m"), &f32_gguf);
    let hf = tmp.path().join("hf");
    write_hf_from_gguf(&f32_gguf, &hf, None);
    on_cpu(HfCheck {
        f32_gguf,
        hf,
        rec: tmp.path().join("rec"),
    });
}

/// Every tiny architecture file (`tests/data/tiny`) as an HF checkpoint: Qwen3's and OLMoE's Q/K
/// norms, Phi-3's fused projections and the MoE routers and per-expert tensors (Mixtral's
/// `block_sparse_moe` names among them) map through the name table, Phi-3's LongRoPE config picks the same
/// factors and attention factor as its GGUF, and Llama 3's `rope_scaling` (type `llama3`, the parameters
/// `benches/reference/tiny_models.py` computed its `rope_freqs` from) gives the same frequency
/// factors, as its YaRN `rope_scaling` gives the YaRN of the GGUF's metadata: logits equal bit for
/// bit to the F32 GGUF of the same weights.
#[test]
fn hf_checkpoints_of_each_architecture_match_their_gguf() {
    struct Same(PathBuf, PathBuf);
    impl BackendTask for Same {
        type Output = ();
        fn run<B: InferenceBackend>(self, device: B::Device) {
            let g = load_model::<B>(&self.0, &device).expect("gguf");
            let h = load_model::<B>(&self.1, &device).expect("HF checkpoint loads");
            let ids = g.tokenizer.encode(PROMPT, true).expect("encode");
            let (lg, tg) = greedy(&g, &ids, 8);
            let (lh, th) = greedy(&h, &ids, 8);
            assert_eq!(tg, th, "greedy tokens");
            assert!(
                lg.iter().zip(&lh).all(|(a, b)| a.to_bits() == b.to_bits()),
                "HF checkpoint and GGUF of the same weights differ"
            );
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny");
    let llama3_scaling = json!({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16});
    // what benches/reference/tiny_models.py wrote into qwen3-yarn-tiny's metadata
    let yarn_scaling = json!({"rope_type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 16});
    for (name, scaling) in [
        ("llama3-tiny", Some(llama3_scaling)),
        ("qwen3-tiny", None),
        ("phi3-tiny", None),
        ("qwen3moe-tiny", None),
        ("olmoe-tiny", None),
        ("mixtral-tiny", None),
        ("qwen3-yarn-tiny", Some(yarn_scaling.clone())),
    ] {
        let f32_gguf = tmp.path().join(format!("{name}-f32.gguf"));
        write_f32_gguf(&tiny.join(format!("{name}.gguf")), &f32_gguf);
        let hf = tmp.path().join(name);
        write_hf_from_gguf(&f32_gguf, &hf, scaling);
        on_cpu(Same(f32_gguf, hf));
    }
    // YaRN without the original context its ramp is anchored to is refused, naming it.
    let f32_gguf = tmp.path().join("qwen3-yarn-tiny-f32.gguf");
    let hf = tmp.path().join("yarn-no-orig");
    let mut no_orig = yarn_scaling;
    no_orig
        .as_object_mut()
        .expect("object")
        .remove("original_max_position_embeddings");
    write_hf_from_gguf(&f32_gguf, &hf, Some(no_orig));
    let e = on_cpu(Load(hf)).expect_err("YaRN without its original context loaded");
    assert!(e.contains("original_max_position_embeddings"), "{e}");
}

// ---- bad SafeTensors --------------------------------------------------------------------------

/// A tiny, valid Llama checkpoint (random weights): the base of the mutation corpus.
fn tiny_hf(dir: &Path, dtype: Dtype) -> Vec<u8> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let (d, ffn, vocab) = (32usize, 64usize, 16usize);
    let mut seed = 7u32;
    let mut rand = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                match dtype {
                    Dtype::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                    Dtype::BF16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                    _ => x.to_le_bytes().to_vec(),
                }
            })
            .collect()
    };
    let shapes: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![vocab, d]),
        ("model.norm.weight".into(), vec![d]),
        ("model.layers.0.input_layernorm.weight".into(), vec![d]),
        (
            "model.layers.0.post_attention_layernorm.weight".into(),
            vec![d],
        ),
        ("model.layers.0.self_attn.q_proj.weight".into(), vec![d, d]),
        ("model.layers.0.self_attn.k_proj.weight".into(), vec![d, d]),
        ("model.layers.0.self_attn.v_proj.weight".into(), vec![d, d]),
        ("model.layers.0.self_attn.o_proj.weight".into(), vec![d, d]),
        ("model.layers.0.mlp.gate_proj.weight".into(), vec![ffn, d]),
        ("model.layers.0.mlp.up_proj.weight".into(), vec![ffn, d]),
        ("model.layers.0.mlp.down_proj.weight".into(), vec![d, ffn]),
    ];
    let data: HashMap<String, Vec<u8>> = shapes
        .iter()
        .map(|(n, s)| (n.clone(), rand(s.iter().product())))
        .collect();
    let views: Vec<(String, TensorView)> = shapes
        .iter()
        .map(|(n, s)| {
            (
                n.clone(),
                TensorView::new(dtype, s.clone(), &data[n]).expect("view"),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).expect("serialize");
    std::fs::write(
        dir.join("config.json"),
        json!({"architectures": ["LlamaForCausalLM"], "hidden_size": d, "intermediate_size": ffn,
               "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
               "vocab_size": vocab})
        .to_string(),
    )
    .expect("config");
    bytes
}

#[test]
fn bad_safetensors_headers_give_errors_not_panics() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("tiny");
    let good = tiny_hf(&dir, Dtype::F32);
    let st = dir.join("model.safetensors");
    std::fs::write(&st, &good).expect("write");
    let ck = cinder::importer::hf_llama::read(&dir, None).expect("the valid tiny checkpoint reads");
    assert_eq!(ck.tensors.len(), 11);
    assert!(ck.config.tie_embeddings);

    let header_len = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    let mut corpus: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [0, 4, 8, 9, header_len / 2, header_len + 7, good.len() - 1] {
        corpus.push((format!("truncated at {cut}"), good[..cut].to_vec()));
    }
    for len in [
        0u64,
        1,
        u64::MAX,
        (good.len() * 2) as u64,
        header_len as u64 + 1,
    ] {
        let mut b = good.clone();
        b[..8].copy_from_slice(&len.to_le_bytes());
        corpus.push((format!("header length {len}"), b));
    }
    let text = String::from_utf8_lossy(&good[8..8 + header_len]).to_string();
    for (from, to) in [
        ("\"F32\"", "\"F8_E4M3\""),
        ("\"F32\"", "\"Q4\""),
        ("data_offsets\":[0,", "data_offsets\":[4,"),
        ("[16,32]", "[16,33]"),
        ("[16,32]", "[16,99999999999]"),
        ("{", "["),
    ] {
        let h = text.replacen(from, to, 1);
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&good[8 + header_len..]);
        corpus.push((format!("header {from} -> {to}"), b));
    }
    for i in (8..8 + header_len).step_by(7) {
        let mut b = good.clone();
        b[i] = b[i].wrapping_add(0x35);
        corpus.push((format!("header byte {i}"), b));
    }
    for (what, bytes) in &corpus {
        std::fs::write(&st, bytes).expect("write");
        let r = std::panic::catch_unwind(|| cinder::importer::hf_llama::read(&dir, None));
        match r {
            Err(_) => panic!("{what}: panicked"),
            Ok(Err(e)) => assert!(!e.to_string().is_empty(), "{what}: an empty error"),
            // A changed byte inside a name or a number can leave a well-formed file; every
            // truncation, bad length and bad header edit above must be refused.
            Ok(Ok(_)) => assert!(
                what.starts_with("header byte"),
                "{what}: a corrupt file was read"
            ),
        }
    }
}

/// The tiny checkpoint in F32, F16 and BF16: each dtype is kept as stored and the model runs.
struct Dtypes(PathBuf);

impl BackendTask for Dtypes {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let mut logits = Vec::new();
        for (dtype, ty) in [
            (Dtype::F32, "F32"),
            (Dtype::F16, "F16"),
            (Dtype::BF16, "BF16"),
        ] {
            let bytes = tiny_hf(&self.0, dtype);
            std::fs::write(self.0.join("model.safetensors"), bytes).expect("write");
            let ck = cinder::importer::hf_llama::read(&self.0, None).expect("reads");
            let (_, q) = ck
                .tensors
                .iter()
                .find(|(n, _)| n == "blk.0.attn_q.weight")
                .expect("q");
            assert_eq!(q.ty.name(), ty);
            let store: HashMap<_, _> = ck.tensors.into_iter().collect();
            let model = cinder::importer::ArchConfig::new("llama", ck.config)
                .expect("llama is registered")
                .build::<B>(&store, &device)
                .expect("builds");
            let mut cache = ContiguousKvCache::<B>::new(1, 16);
            logits.push(prefill(&model, &mut cache, &[1, 2, 3, 4]).expect("runs"));
        }
        let scale = logits[0].iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(scale.is_finite() && scale > 0.01, "F32 logits {scale}");
        for (name, tol) in [("F16", 0.01), ("BF16", 0.05)] {
            let l = &logits[if name == "F16" { 1 } else { 2 }];
            let diff = logits[0]
                .iter()
                .zip(l)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff <= tol * scale, "{name}: {diff} vs scale {scale}");
        }
    }
}

#[test]
fn f16_and_bf16_checkpoints_are_kept_and_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    on_cpu(Dtypes(tmp.path().join("tiny")));
}

#[test]
fn rope_permutation_matches_llama_cpp() {
    // 1 head of hd = 4, rows of 1 byte: HF rows [a0 a1 b0 b1] (halves) -> GGUF [a0 b0 a1 b1].
    let hf = [10u8, 11, 20, 21];
    assert_eq!(
        cinder::importer::hf_llama::permute_rope_rows(&hf, 1, 4, 1),
        vec![10, 20, 11, 21]
    );
}

/// SmolLM2's GGUF rewritten with extra metadata pairs and/or one extra F32 tensor.
fn smollm2_with(
    dst: &Path,
    extra_kv: &[(&str, cinder::gguf::Value)],
    extra_tensor: Option<(&str, usize)>,
) {
    use cinder::gguf::{GgufFile, writer::GgufWriter};
    let f = GgufFile::open(model_path("smollm2-135m")).expect("gguf");
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "general.alignment" {
            w.add_kv(k.clone(), v.clone()).expect("kv");
        }
    }
    for (k, v) in extra_kv {
        w.add_kv(*k, v.clone()).expect("kv");
    }
    for info in f.tensors() {
        w.add_tensor(
            info.name.clone(),
            &info.dims,
            info.ggml_type,
            f.tensor_data(info).to_vec(),
        )
        .expect("tensor");
    }
    if let Some((name, n)) = extra_tensor {
        w.add_f32_tensor(name, &[n as u64], &vec![1.0; n])
            .expect("tensor");
    }
    w.write_file(dst).expect("write gguf");
}

/// A tensor or a RoPE scaling the graph would not apply (an MoE router, an unknown scaling type) is
/// refused with its name, never ignored; Llama 3's `rope_freqs` is applied (`tests/architectures.rs` checks its effect
/// against llama.cpp) and refused when its length does not fit the rotated dims; the unmodified
/// rewrite still loads.
#[test]
fn tensors_and_scalings_cinder_does_not_apply_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("plain.gguf");
    smollm2_with(&plain, &[], None);
    on_cpu(Load(plain)).expect("the rewritten file loads");
    // SmolLM2 rotates 64 dims per head: 32 frequency factors.
    let freqs = dir.path().join("freqs.gguf");
    smollm2_with(&freqs, &[], Some(("rope_freqs.weight", 32)));
    on_cpu(Load(freqs)).expect("rope_freqs is applied");
    let short = dir.path().join("short_freqs.gguf");
    smollm2_with(&short, &[], Some(("rope_freqs.weight", 31)));
    let e = on_cpu(Load(short)).expect_err("31 factors for 32 pairs loaded");
    assert!(e.contains("rope_freqs.weight"), "{e}");
    let router = dir.path().join("router.gguf");
    smollm2_with(&router, &[], Some(("blk.0.ffn_gate_inp.weight", 576)));
    let e = on_cpu(Load(router)).expect_err("an MoE router loaded");
    assert!(e.contains("blk.0.ffn_gate_inp.weight"), "{e}");
    // YaRN is applied (`tests/architectures.rs` checks it against llama.cpp and transformers), but
    // not without the original context its ramp is anchored to; an unknown scaling is refused.
    use cinder::gguf::Value;
    let ty = |t: &str| ("llama.rope.scaling.type", Value::String(t.into()));
    let factor = ("llama.rope.scaling.factor", Value::F32(4.0));
    let yarn = dir.path().join("yarn.gguf");
    smollm2_with(
        &yarn,
        &[
            ty("yarn"),
            factor.clone(),
            (
                "llama.rope.scaling.original_context_length",
                Value::U32(2048),
            ),
        ],
        None,
    );
    on_cpu(Load(yarn)).expect("YaRN with its factor and original context loads");
    let no_orig = dir.path().join("yarn_no_orig.gguf");
    smollm2_with(&no_orig, &[ty("yarn"), factor], None);
    let e = on_cpu(Load(no_orig)).expect_err("YaRN without its original context loaded");
    assert!(
        e.contains("llama.rope.scaling.original_context_length") && e.contains("yarn"),
        "{e}"
    );
    let dynamic = dir.path().join("dynamic.gguf");
    smollm2_with(&dynamic, &[ty("dynamic")], None);
    let e = on_cpu(Load(dynamic)).expect_err("an unknown RoPE scaling loaded");
    assert!(
        e.contains("llama.rope.scaling.type") && e.contains("dynamic"),
        "{e}"
    );
}
