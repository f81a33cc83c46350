//! Backpressure and a fixed memory budget on the real model (its own test binary, so the process's
//! resident memory is this test's alone): with a small KV budget and 64 submitted requests, the
//! KV store never grows, requests beyond the queue are refused with `QueueFull` at once, every
//! admitted request finishes, and nothing panics.

mod common;

use std::time::{Duration, Instant};

use cinder::prelude::*;
use cinder::runtime::RuntimeError;
use cinder::runtime::engine::{Engine, EngineConfig, Event, EventStream, Request};
use cinder::runtime::kv::KvBudget;
use cinder::runtime::scheduler::SchedulerConfig;
use common::*;

const WAITING: usize = 12;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn prompt(i: usize, vocab: u32) -> Vec<u32> {
    (0..24u64)
        .map(|j| (((j + 1) * 2_654_435_761 + i as u64 * 97) % vocab as u64) as u32)
        .collect()
}

fn finish(mut s: EventStream) -> (usize, FinishReason) {
    let mut n = 0;
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token { .. } => n += 1,
            Event::Finished { reason, .. } => return (n, reason),
        }
    }
    panic!("stream closed without Finished");
}

struct Budget;

impl BackendTask for Budget {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("load");
        let vocab = m.model.vocab_size() as u32;
        let cfg = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: 64,
                max_seqs: 4,
            },
            // 256 tokens: room for about 8 of these requests at once, far fewer than 64.
            kv_budget: Some(KvBudget::Tokens(256)),
            max_waiting: WAITING,
            ..EngineConfig::default()
        };
        let engine =
            Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine");
        let h = engine.handle();
        let kv_bytes = h.stats().kv_bytes;
        assert!(kv_bytes > 0);
        let req = |i: usize| Request {
            stop_on_eos: false,
            ..Request::greedy(prompt(i, vocab), 8)
        };
        // Warm-up wave, then the resident baseline.
        for s in (0..4)
            .map(|i| h.submit(req(i)).expect("submit"))
            .collect::<Vec<_>>()
        {
            assert_eq!(finish(s), (8, FinishReason::Length));
        }
        let rss0 = rss_bytes();

        // 64 submissions at once: the queue takes WAITING (plus what the engine admits meanwhile),
        // the rest are refused at once.
        let t0 = Instant::now();
        let mut accepted = Vec::new();
        let mut refused = 0;
        for i in 0..64 {
            match h.submit(req(100 + i)) {
                Ok(s) => accepted.push(s),
                Err(RuntimeError::QueueFull { waiting, limit }) => {
                    assert_eq!(limit, WAITING);
                    assert!(waiting >= WAITING);
                    refused += 1;
                }
                Err(e) => panic!("unexpected refusal: {e}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "submit blocked");
        assert!(
            refused > 0,
            "64 submissions never filled a {WAITING}-deep queue"
        );
        assert!(accepted.len() >= WAITING);
        eprintln!("accepted {}, refused {refused}", accepted.len());
        let mut max_used = 0;
        for s in accepted {
            assert_eq!(
                finish(s),
                (8, FinishReason::Length),
                "admitted request did not finish"
            );
            let st = h.stats();
            assert_eq!(st.kv_bytes, kv_bytes, "the KV store changed size");
            assert!(st.kv_blocks_used <= st.kv_blocks_total);
            assert!(st.waiting <= WAITING);
            max_used = max_used.max(st.kv_blocks_used);
        }
        // A second wave that retries on QueueFull (bounded in time): everything gets served.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut pending: Vec<usize> = (0..64).collect();
        let mut streams = Vec::new();
        while !pending.is_empty() {
            assert!(Instant::now() < deadline, "second wave did not drain");
            pending.retain(|&i| match h.submit(req(1000 + i)) {
                Ok(s) => {
                    streams.push(s);
                    false
                }
                Err(RuntimeError::QueueFull { .. }) => true,
                Err(e) => panic!("unexpected refusal: {e}"),
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in streams {
            assert_eq!(finish(s), (8, FinishReason::Length));
        }
        let rss1 = rss_bytes();
        eprintln!(
            "KV store {} KiB, max blocks used {max_used}, RSS {} -> {} MiB, preemptions {}",
            kv_bytes >> 10,
            rss0 >> 20,
            rss1 >> 20,
            h.stats().preemptions
        );
        // Flat: 128 more requests cost no more than allocator noise.
        assert!(
            rss1 < rss0 + (24 << 20),
            "resident memory grew from {} to {} MiB",
            rss0 >> 20,
            rss1 >> 20
        );
        assert!(h.has_capacity());
    }
}

#[test]
fn small_budget_64_requests_flat_memory_queue_full_and_all_admitted_finish() {
    dispatch(primary_backend(), Budget).expect("backend");
}
