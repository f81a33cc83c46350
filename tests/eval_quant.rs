//! Quantization quality measurement, end to end through the CLI with the real SmolLM2 file:
//! `perplexity --save-logits` / `--kl-divergence` and `eval-quant`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn cinder(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cinder"))
        .args(args)
        .output()
        .expect("cinder runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_run(args: &[&str]) -> Value {
    let (ok, out, err) = cinder(args);
    assert!(ok, "cinder {args:?} failed: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn saved_logits_compare_a_model_with_itself_as_zero_and_refuse_mismatches() {
    let dir = tempfile::tempdir().expect("tmp");
    let base = dir.path().join("base.logits");
    let b = base.to_str().expect("path");
    let common = [
        "--file",
        "lee-corpus",
        "--ctx",
        "128",
        "--chunks",
        "3",
        "--json",
    ];
    let saved = json_run(
        &[
            &["perplexity", "smollm2-135m", "--save-logits", b],
            &common[..],
        ]
        .concat(),
    );
    let same = json_run(
        &[
            &["perplexity", "smollm2-135m", "--kl-divergence", b],
            &common[..],
        ]
        .concat(),
    );
    assert_eq!(saved["ppl"], same["ppl"], "the same model scores the same");
    let k = &same["kl_divergence"];
    assert_eq!(k["positions"], saved["tokens"]);
    assert!(k["kld"][0].as_f64().expect("kld") < 1e-6, "{k}");
    assert_eq!(k["same_top_pct"][0].as_f64(), Some(100.0));
    // Stored log-probs are f32: the ratio is 1 to their precision.
    assert!(
        (k["ppl_ratio"].as_f64().expect("ratio") - 1.0).abs() < 1e-5,
        "{k}"
    );

    // The ctx comes from the file when not given; another text is refused, naming why.
    let other = dir.path().join("other.txt");
    std::fs::write(
        &other,
        "A different text about rivers, mountains and the sea. ".repeat(60),
    )
    .expect("write");
    let (ok, _, err) = cinder(&[
        "perplexity",
        "smollm2-135m",
        "--file",
        other.to_str().expect("path"),
        "--kl-divergence",
        b,
    ]);
    assert!(!ok && err.contains("tokenizes differently"), "{err}");
    let (ok, _, err) = cinder(&[
        "perplexity",
        "smollm2-135m",
        "--file",
        "lee-corpus",
        "--ctx",
        "256",
        "--kl-divergence",
        b,
    ]);
    assert!(!ok && err.contains("ctx 128"), "{err}");

    // A damaged file is refused with its name, not read.
    let mut bytes = std::fs::read(&base).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&base, &bytes).expect("write");
    let (ok, _, err) = cinder(
        &[
            &["perplexity", "smollm2-135m", "--kl-divergence", b],
            &common[..],
        ]
        .concat(),
    );
    assert!(
        !ok && err.contains("checksum") && err.contains("base.logits"),
        "{err}"
    );
    std::fs::write(&base, &bytes[..100]).expect("truncate");
    let (ok, _, err) = cinder(
        &[
            &["perplexity", "smollm2-135m", "--kl-divergence", b],
            &common[..],
        ]
        .concat(),
    );
    assert!(!ok && err.contains("truncated"), "{err}");
}

/// `| type | size MiB | bits/weight | PPL | ΔPPL % | mean KLD | same top % | tier |` rows by type.
fn table_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| type"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn lead(cell: &str) -> f64 {
    cell.split_whitespace()
        .next()
        .and_then(|v| v.trim_start_matches('+').parse().ok())
        .unwrap_or_else(|| panic!("not a number: {cell:?}"))
}

#[test]
fn eval_quant_orders_types_by_quality_and_flags_the_budget() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("table.md");
    std::fs::write(
        &out,
        "# Doc\nbefore\n<!-- eval-quant:begin -->\nold\n<!-- eval-quant:end -->\nafter\n",
    )
    .expect("write");
    let (ok, stdout, err) = cinder(&[
        "eval-quant",
        "smollm2-135m",
        "--types",
        "q8_0,q4_0",
        "--file",
        "lee-corpus",
        "--ctx",
        "128",
        "--chunks",
        "3",
        "--out",
        out.to_str().expect("path"),
    ]);
    assert!(ok, "eval-quant failed: {err}");
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[0][0].starts_with("f16"));
    let (q8, q4) = (&rows[1], &rows[2]);
    assert_eq!((q8[0].as_str(), q4[0].as_str()), ("q8_0", "q4_0"));
    // Size and bits per weight follow the formats: f16 16, q8_0 8.5, q4_0 4.5 (weights dominate).
    let bpw: Vec<f64> = rows.iter().map(|r| lead(&r[2])).collect();
    assert!(
        bpw[0] > 15.0 && (8.3..8.8).contains(&bpw[1]) && (4.3..4.8).contains(&bpw[2]),
        "{bpw:?}"
    );
    // Fewer bits, more divergence.
    assert!(
        lead(&q8[5]) < lead(&q4[5]),
        "KLD q8_0 {} vs q4_0 {}",
        q8[5],
        q4[5]
    );
    assert!(
        lead(&q8[6]) > lead(&q4[6]),
        "same top q8_0 {} vs q4_0 {}",
        q8[6],
        q4[6]
    );
    assert!(lead(&q8[4]).abs() < 2.0, "q8_0 ΔPPL {}", q8[4]);
    assert!(q8[7].contains("safety-critical"), "{}", q8[7]);
    // Pure Q4_0 of a 135M model (tied embedding included) is well over the 8% budget.
    assert!(q4[7].contains("over budget"), "{}", q4[7]);
    // --out replaced only the marked part.
    let doc = std::fs::read_to_string(&out).expect("read");
    assert!(doc.starts_with("# Doc\nbefore\n<!-- eval-quant:begin -->\n"));
    assert!(doc.ends_with("<!-- eval-quant:end -->\nafter\n"));
    assert!(doc.contains("| q4_0 |") && !doc.contains("\nold\n"));
    assert!(!Path::new(&format!("{}.partial", out.display())).exists());

    let (ok, _, err) = cinder(&[
        "eval-quant",
        "smollm2-135m",
        "--types",
        "q3_x",
        "--file",
        "lee-corpus",
        "--ctx",
        "128",
        "--chunks",
        "1",
    ]);
    assert!(!ok && err.contains("q3_x"), "{err}");
}
