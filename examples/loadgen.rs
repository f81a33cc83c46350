//! A load generator for OpenAI-compatible servers (`cinder serve`, llama-server, vLLM): N concurrent
//! clients stream `/v1/completions` requests for a fixed time and report TTFT percentiles and
//! throughput. Loopback only by intent: point it at a server you started.
//!
//! ```sh
//! cargo run --release --example loadgen -- --url http://127.0.0.1:8080 --clients 4 --seconds 60
//! ```

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

struct Args {
    url: String,
    clients: usize,
    seconds: u64,
    max_tokens: usize,
    model: Option<String>,
    json: bool,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        url: "http://127.0.0.1:8080".into(),
        clients: 4,
        seconds: 60,
        max_tokens: 64,
        model: None,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--url" => a.url = v()?,
            "--clients" => a.clients = v()?.parse()?,
            "--seconds" => a.seconds = v()?.parse()?,
            "--max-tokens" => a.max_tokens = v()?.parse()?,
            "--model" => a.model = Some(v()?),
            "--json" => a.json = true,
            other => bail!(
                "unknown flag {other} (--url --clients --seconds --max-tokens --model --json)"
            ),
        }
    }
    if a.clients == 0 || a.seconds == 0 {
        bail!("--clients and --seconds must be at least 1");
    }
    Ok(a)
}

#[derive(Default)]
struct Tally {
    ttft_ms: Vec<f64>,
    tokens: usize,
    ok: usize,
    empty: usize,
    failed: usize,
    statuses: std::collections::BTreeMap<u16, usize>,
    /// client-side failures by message (connection, stream read, bad event)
    errors: std::collections::BTreeMap<String, usize>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// One streamed request: (status, ttft, tokens).
fn one(
    client: &reqwest::blocking::Client,
    a: &Args,
    n: usize,
) -> Result<(u16, Option<Duration>, usize)> {
    let topics = [
        "the sea",
        "a city at night",
        "an old clock",
        "mountains",
        "a library",
    ];
    let mut body = serde_json::json!({
        "prompt": format!("Write a short paragraph about {}, part {n}.", topics[n % topics.len()]),
        "max_tokens": a.max_tokens, "temperature": 0.8, "seed": n, "stream": true,
    });
    if let Some(m) = &a.model {
        body["model"] = serde_json::json!(m);
    }
    let t0 = Instant::now();
    let r = client
        .post(format!("{}/v1/completions", a.url))
        .json(&body)
        .send()?;
    let status = r.status().as_u16();
    if status != 200 {
        return Ok((status, None, 0));
    }
    let (mut first, mut tokens) = (None, 0);
    for line in BufReader::new(r).lines() {
        let line = line.context("reading the stream")?;
        let Some(d) = line.strip_prefix("data: ") else {
            continue;
        };
        if d == "[DONE]" {
            break;
        }
        let v: serde_json::Value =
            serde_json::from_str(d).with_context(|| format!("bad event {d:?}"))?;
        let text = v["choices"][0]["text"].as_str().unwrap_or("");
        if !text.is_empty() {
            first.get_or_insert_with(|| t0.elapsed());
            // One chunk per token for Cinder and llama-server.
            tokens += 1;
        }
    }
    Ok((status, first, tokens))
}

fn main() -> Result<()> {
    let a = Arc::new(parse()?);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    let workers: Vec<_> = (0..a.clients)
        .map(|c| {
            let (a, tally) = (a.clone(), tally.clone());
            std::thread::spawn(move || -> Result<()> {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(600))
                    .build()?;
                let mut n = c;
                while Instant::now() < end {
                    let r = one(&client, &a, n);
                    n += a.clients;
                    let mut t = tally.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                    match r {
                        // A 200 with no text (the model ended at once) is a success without a TTFT.
                        Ok((200, ttft, tokens)) => {
                            t.ok += 1;
                            t.tokens += tokens;
                            if let Some(ttft) = ttft {
                                t.ttft_ms.push(ttft.as_secs_f64() * 1e3);
                            } else {
                                t.empty += 1;
                            }
                            *t.statuses.entry(200).or_insert(0) += 1;
                        }
                        Ok((s, _, _)) => {
                            t.failed += 1;
                            *t.statuses.entry(s).or_insert(0) += 1;
                        }
                        Err(e) => {
                            t.failed += 1;
                            *t.errors.entry(format!("{e:#}")).or_insert(0) += 1;
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
    }
    let wall = start.elapsed().as_secs_f64();
    let mut t = tally.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let (p50, p99) = (pct(&mut t.ttft_ms, 50.0), pct(&mut t.ttft_ms, 99.0));
    let tps = t.tokens as f64 / wall;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"clients": a.clients, "seconds": wall, "requests_ok": t.ok,
                "requests_failed": t.failed, "requests_empty": t.empty, "statuses": t.statuses, "errors": t.errors, "tokens": t.tokens,
                "tokens_per_s": tps, "ttft_ms_p50": p50, "ttft_ms_p99": p99})
        );
    } else {
        println!(
            "{} clients, {wall:.1} s: {} ok, {} failed {:?}; {} tokens, {tps:.1} tokens/s; TTFT p50 {p50:.1} ms, p99 {p99:.1} ms",
            a.clients, t.ok, t.failed, t.statuses, t.tokens
        );
        for (e, n) in &t.errors {
            println!("  {n} x {e}");
        }
    }
    Ok(())
}
