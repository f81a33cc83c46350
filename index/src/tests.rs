use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

fn random_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect()
}

fn filled(kind: IndexKind, metric: Metric, n: usize, dim: usize) -> VectorIndex {
    let mut ix = VectorIndex::new(IndexOptions::new(dim, metric, kind)).expect("new");
    let items = random_vectors(n, dim, 1)
        .into_iter()
        .enumerate()
        .map(|(i, v)| (format!("p{i}"), v, json!({ "n": i })))
        .collect();
    ix.upsert_batch(items).expect("batch");
    ix
}

#[test]
fn cosine_normalizes_and_l2_does_not() {
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let mut cos = VectorIndex::new(IndexOptions::new(2, Metric::Cosine, kind)).unwrap();
        cos.upsert("long", &[10.0, 0.0], json!(null)).unwrap();
        cos.upsert("diag", &[1.0, 1.0], json!(null)).unwrap();
        // By cosine, a short vector along x is closest to the long one along x, with similarity 1.
        let hits = cos.search(&[0.1, 0.0], 2, Some(Metric::Cosine)).unwrap();
        assert_eq!(hits[0].id, "long");
        assert!(
            (hits[0].score - 1.0).abs() < 1e-6,
            "{kind}: {}",
            hits[0].score
        );
        assert!((hits[1].score - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);

        let mut l2 = VectorIndex::new(IndexOptions::new(2, Metric::L2, kind)).unwrap();
        l2.upsert("long", &[10.0, 0.0], json!(null)).unwrap();
        l2.upsert("diag", &[1.0, 1.0], json!(null)).unwrap();
        // By L2 the raw vectors count: (0.1, 0) is nearer (1, 1) than (10, 0).
        let hits = l2.search(&[0.1, 0.0], 2, None).unwrap();
        assert_eq!(hits[0].id, "diag");
        assert!((hits[0].score - (0.81f32 + 1.0).sqrt()).abs() < 1e-5);
        assert!((hits[1].score - 9.9).abs() < 1e-5);
    }
}

#[test]
fn refuses_bad_queries_and_vectors() {
    let mut ix = VectorIndex::new(IndexOptions::new(3, Metric::Cosine, IndexKind::Flat)).unwrap();
    ix.upsert("a", &[1.0, 2.0, 3.0], json!(null)).unwrap();
    let e = ix.search(&[1.0, 2.0], 1, None).unwrap_err();
    assert!(e.to_string().contains("has 2 dimensions"), "{e}");
    let e = ix
        .search(&[1.0, 2.0, 3.0], 1, Some(Metric::L2))
        .unwrap_err();
    assert!(matches!(e, IndexError::MetricMismatch { .. }), "{e}");
    let e = ix.upsert("b", &[0.0, 0.0, 0.0], json!(null)).unwrap_err();
    assert!(e.to_string().contains("zero vector"), "{e}");
    let e = ix
        .upsert("b", &[f32::NAN, 0.0, 1.0], json!(null))
        .unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");
    assert!(ix.upsert("", &[1.0, 0.0, 0.0], json!(null)).is_err());
    assert!(VectorIndex::new(IndexOptions::new(0, Metric::L2, IndexKind::Flat)).is_err());
    // A bad vector in a batch leaves the index unchanged.
    let e = ix
        .upsert_batch(vec![
            ("c".into(), vec![1.0, 0.0, 0.0], json!(null)),
            ("d".into(), vec![1.0, 0.0], json!(null)),
        ])
        .unwrap_err();
    assert!(matches!(e, IndexError::Dimension { .. }));
    assert_eq!(ix.len(), 1);
}

#[test]
fn upsert_delete_and_payloads() {
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let mut ix = filled(kind, Metric::Dot, 200, 16);
        let v = random_vectors(1, 16, 99).remove(0);
        ix.upsert("p5", &v, json!({"new": true})).unwrap();
        assert_eq!(ix.len(), 200);
        let hits = ix.search(&v, 1, None).unwrap();
        assert_eq!(hits[0].id, "p5");
        assert_eq!(hits[0].payload, json!({"new": true}));
        assert!(ix.delete("p5").unwrap());
        assert!(!ix.delete("p5").unwrap());
        assert_eq!(ix.len(), 199);
        let hits = ix.search(&v, 199, None).unwrap();
        assert_eq!(hits.len(), 199, "{kind}");
        assert!(hits.iter().all(|h| h.id != "p5"));
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    }
}

#[test]
fn hnsw_recall_on_small_random_set() {
    let (n, dim) = (3000, 32);
    let flat = filled(IndexKind::Flat, Metric::Cosine, n, dim);
    let hnsw = filled(IndexKind::Hnsw, Metric::Cosine, n, dim);
    let queries = random_vectors(100, dim, 2);
    let mut found = 0;
    for q in &queries {
        let exact: HashSet<String> = flat
            .search(q, 10, None)
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        found += hnsw
            .search(q, 10, None)
            .unwrap()
            .iter()
            .filter(|h| exact.contains(&h.id))
            .count();
    }
    let recall = found as f64 / (10 * queries.len()) as f64;
    assert!(recall >= 0.95, "recall@10 {recall}");
}

use std::collections::HashSet;

#[test]
fn save_open_round_trip_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let mut ix = filled(kind, Metric::L2, 300, 8);
        ix.set_model(Some("all-minilm-l6-v2".into()));
        ix.delete("p7").unwrap();
        let path = dir.path().join(format!("{kind}.cidx"));
        ix.save(&path).unwrap();
        let back = VectorIndex::open(&path).unwrap();
        assert_eq!(back.options(), ix.options());
        assert_eq!(back.len(), 299);
        let q = random_vectors(1, 8, 5).remove(0);
        assert_eq!(
            back.search(&q, 5, None).unwrap(),
            ix.search(&q, 5, None).unwrap()
        );
        // New points after reopening get fresh keys (no clash with the deleted one's).
        let mut back = back;
        back.upsert("new", &q, json!(1)).unwrap();
        assert_eq!(back.search(&q, 1, None).unwrap()[0].id, "new");

        let bytes = std::fs::read(&path).unwrap();
        // Truncated, one flipped byte anywhere, foreign file: all refused with a named reason.
        for (what, bad) in [
            ("truncated", bytes[..bytes.len() / 2].to_vec()),
            ("flipped", {
                let mut b = bytes.clone();
                let i = b.len() / 3;
                b[i] ^= 0x40;
                b
            }),
            ("empty", Vec::new()),
            ("foreign", b"{\"not\": \"an index\"}".to_vec()),
        ] {
            let e = file::parse_for_test(&path, &bad).unwrap_err();
            assert!(matches!(e, IndexError::Corrupt { .. }), "{what}: {e}");
        }
    }
    // No temp files left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn metric_and_kind_parse() {
    assert_eq!("Cosine".parse::<Metric>().unwrap(), Metric::Cosine);
    assert_eq!("l2".parse::<Metric>().unwrap(), Metric::L2);
    assert!("manhattan".parse::<Metric>().is_err());
    assert_eq!("hnsw".parse::<IndexKind>().unwrap(), IndexKind::Hnsw);
    assert!("ivf".parse::<IndexKind>().is_err());
}
