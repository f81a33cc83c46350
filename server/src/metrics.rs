//! Prometheus metrics in the text exposition format (version 0.0.4), rendered by hand: a handful of
//! counters and two histograms do not need a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cinder_runtime::engine::EngineStats;

/// A fixed-bucket histogram of seconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, seconds: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if seconds <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let n = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

const TTFT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
];

/// Everything the server counts.
#[derive(Debug)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// time to first token
    pub ttft: Histogram,
    /// time between tokens of one stream
    pub itl: Histogram,
    /// prompt tokens of finished requests
    pub prompt_tokens: AtomicU64,
    /// generated tokens of finished requests
    pub generation_tokens: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Mutex::new(BTreeMap::new()),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts a finished HTTP request (or gRPC call) by endpoint and status.
    pub fn count_request(&self, endpoint: &str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((endpoint.to_string(), status)).or_insert(0) += 1;
    }

    /// The exposition text, with the engine's current figures.
    pub fn render(&self, st: &EngineStats, replica: &str) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, v: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        gauge(
            "cinder_queue_depth",
            "Requests waiting for admission.",
            "gauge",
            st.waiting as f64,
        );
        gauge(
            "cinder_running_sequences",
            "Sequences being generated.",
            "gauge",
            st.running as f64,
        );
        gauge(
            "cinder_kv_blocks_used",
            "KV cache blocks owned by sequences.",
            "gauge",
            st.kv_blocks_used as f64,
        );
        gauge(
            "cinder_kv_blocks_total",
            "KV cache blocks in the pool.",
            "gauge",
            st.kv_blocks_total as f64,
        );
        gauge(
            "cinder_kv_blocks_cached",
            "KV cache blocks holding a reusable prefix.",
            "gauge",
            st.kv_blocks_cached as f64,
        );
        gauge(
            "cinder_kv_cache_bytes",
            "Bytes of the KV cache (allocated once).",
            "gauge",
            st.kv_bytes as f64,
        );
        gauge(
            "cinder_prefix_cache_queried_tokens_total",
            "Prompt tokens looked up in the prefix cache.",
            "counter",
            st.prefix_queried_tokens as f64,
        );
        gauge(
            "cinder_prefix_cache_hit_tokens_total",
            "Prompt tokens served from the prefix cache.",
            "counter",
            st.prefix_hit_tokens as f64,
        );
        gauge(
            "cinder_prefix_cache_miss_tokens_total",
            "Prompt tokens not found in the prefix cache (computed).",
            "counter",
            st.prefix_queried_tokens
                .saturating_sub(st.prefix_hit_tokens) as f64,
        );
        gauge(
            "cinder_prefix_cache_hit_blocks_total",
            "Full prompt blocks served from the prefix cache.",
            "counter",
            st.prefix_hit_blocks as f64,
        );
        gauge(
            "cinder_prefix_cache_miss_blocks_total",
            "Full prompt blocks not found in the prefix cache.",
            "counter",
            st.prefix_queried_blocks
                .saturating_sub(st.prefix_hit_blocks) as f64,
        );
        gauge(
            "cinder_spec_draft_tokens_total",
            "Speculative tokens proposed (prompt lookup) and verified.",
            "counter",
            st.spec_draft_tokens as f64,
        );
        gauge(
            "cinder_spec_accepted_tokens_total",
            "Speculative tokens accepted (acceptance rate = accepted / draft).",
            "counter",
            st.spec_accepted_tokens as f64,
        );
        gauge(
            "cinder_preemptions_total",
            "Sequences preempted for lack of KV blocks.",
            "counter",
            st.preemptions as f64,
        );
        gauge(
            "cinder_engine_steps_total",
            "Batched forwards run.",
            "counter",
            st.steps as f64,
        );
        gauge(
            "cinder_prompt_tokens_total",
            "Prompt tokens of finished requests.",
            "counter",
            self.prompt_tokens.load(Ordering::Relaxed) as f64,
        );
        gauge(
            "cinder_generation_tokens_total",
            "Tokens generated for finished requests.",
            "counter",
            self.generation_tokens.load(Ordering::Relaxed) as f64,
        );
        let _ = writeln!(
            out,
            "# HELP cinder_replica_info This replica.\n# TYPE cinder_replica_info gauge\ncinder_replica_info{{replica=\"{}\"}} 1",
            replica.replace(['"', '\\', '\n'], "_")
        );
        let _ = writeln!(
            out,
            "# HELP cinder_requests_total Requests by endpoint and HTTP status.\n# TYPE cinder_requests_total counter"
        );
        for ((ep, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "cinder_requests_total{{endpoint=\"{ep}\",status=\"{status}\"}} {n}"
            );
        }
        self.ttft.render(
            "cinder_time_to_first_token_seconds",
            "Time to first token.",
            &mut out,
        );
        self.itl.render(
            "cinder_inter_token_latency_seconds",
            "Time between consecutive tokens of a stream.",
            &mut out,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_buckets_and_counters() {
        let m = Metrics::default();
        m.ttft.observe(0.03);
        m.ttft.observe(3.0);
        m.count_request("/v1/completions", 200);
        m.count_request("/v1/completions", 429);
        m.count_request("/v1/completions", 200);
        let text = m.render(&EngineStats::default(), "r1");
        assert!(text.contains("cinder_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("cinder_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("cinder_time_to_first_token_seconds_sum 3.03"));
        assert!(
            text.contains("cinder_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2")
        );
        assert!(text.contains("cinder_replica_info{replica=\"r1\"} 1"));
        assert!(text.contains("cinder_queue_depth 0"));
    }

    #[test]
    fn prefix_cache_hits_and_misses_in_blocks_and_tokens() {
        let st = EngineStats {
            prefix_queried_tokens: 100,
            prefix_hit_tokens: 64,
            prefix_queried_blocks: 6,
            prefix_hit_blocks: 4,
            ..EngineStats::default()
        };
        let text = Metrics::default().render(&st, "r1");
        for line in [
            "cinder_prefix_cache_hit_tokens_total 64",
            "cinder_prefix_cache_miss_tokens_total 36",
            "cinder_prefix_cache_hit_blocks_total 4",
            "cinder_prefix_cache_miss_blocks_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?}");
        }
    }
}
