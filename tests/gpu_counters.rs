//! The structure of a decode step on a CubeCL backend (wgpu; Mesa lavapipe on machines without a
//! GPU), counted, not estimated: kernel launches per decoded token (CubeCL's launch spans,
//! counted by `counters::LaunchCounter`) and host syncs (every read of a step's results goes
//! through `counters::read_back`). Bars, at batch 1, greedy: at most 12 launches per layer per
//! token, and exactly one host sync per token (the sampled token ids).
//!
//! Runs where wgpu is compiled in (CI's backend pass).

mod common;

#[cfg(feature = "wgpu")]
mod gpu {
    use cinder::backends::counters::{LaunchCounter, host_syncs, launches};
    use cinder::backends::types::Wgpu;
    use cinder::prelude::*;
    use cinder::runtime::engine::{Engine, EngineConfig, Request};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::common::{collect_to_length, model_path};

    /// Launches and syncs per decoded token of a greedy request through the engine: a request of
    /// `n + 1` tokens less one of 1 (the same prompt and first token).
    fn per_token(model: &str, n: usize) -> (f64, f64, usize) {
        let device = Default::default();
        let m = cinder::importer::load_model::<Wgpu>(&model_path(model), &device).expect("load");
        let layers = m.model.n_layers();
        let engine = Engine::start::<Wgpu, _>(
            m.model.clone(),
            m.tokenizer.clone(),
            EngineConfig::default(),
        )
        .expect("engine");
        let h = engine.handle();
        let prompt = m
            .tokenizer
            .encode("The capital of France is", true)
            .expect("encode");
        let run = |len: usize| {
            let (l0, s0) = (launches(), host_syncs());
            let r = Request {
                stop_on_eos: false,
                ..Request::greedy(prompt.clone(), len)
            };
            let toks = collect_to_length(h.submit(r).expect("submit"));
            assert_eq!(toks.len(), len);
            (launches() - l0, host_syncs() - s0)
        };
        run(n + 1); // warm-up: kernel compilation, first allocations
        let (l1, s1) = run(1);
        let (ln, sn) = run(n + 1);
        (
            (ln - l1) as f64 / n as f64,
            (sn - s1) as f64 / n as f64,
            layers,
        )
    }

    #[test]
    fn a_decode_step_has_few_launches_and_one_host_sync() {
        let counter = LaunchCounter.with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(LaunchCounter::TARGET, tracing::Level::TRACE),
        );
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(counter))
            .expect("the only subscriber of this test binary");
        for (model, bar) in [("smollm2-135m", 12.0), ("gemma3-270m", 12.0)] {
            let (launches, syncs, layers) = per_token(model, 8);
            let per_layer = launches / layers as f64;
            eprintln!(
                "{model} on wgpu: {launches:.1} launches per token ({per_layer:.2} per layer over \
                 {layers} layers), {syncs:.2} host syncs per token"
            );
            assert!(
                launches > layers as f64,
                "{model}: the launches were not counted"
            );
            assert!(
                per_layer <= bar,
                "{model}: {per_layer:.2} launches per layer"
            );
            assert_eq!(syncs, 1.0, "{model}: host syncs per token");
        }
    }
}
