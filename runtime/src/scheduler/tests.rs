//! Scheduler rules on integers: budgets, FCFS, chunked prefill, prefix reuse, preemption, no leaks.

use super::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn sched(blocks: usize, bs: usize, max_tokens: usize, max_seqs: usize) -> Scheduler {
    Scheduler::new(
        SchedulerConfig {
            max_batched_tokens: max_tokens,
            max_seqs,
        },
        BlockManager::new(blocks, bs, true),
    )
}

/// Runs a step, "sampling" token 7 for every sequence that asks.
fn step(s: &mut Scheduler) -> StepPlan {
    let plan = s.schedule();
    let sampled: Vec<(SeqId, u32)> = plan
        .seqs
        .iter()
        .filter(|q| q.sample)
        .map(|q| (q.id, 7))
        .collect();
    s.update(&plan, &sampled);
    plan
}

#[test]
fn decodes_first_then_chunked_prefill_within_the_budget() {
    let mut s = sched(64, 4, 8, 8);
    s.add(1, vec![1; 3]);
    s.add(2, vec![2; 3]);
    let p = step(&mut s);
    assert_eq!(p.tokens(), 6);
    assert_eq!(p.admitted, vec![1, 2]);
    assert!(p.seqs.iter().all(|q| q.sample));
    // A long prompt arrives: two decode tokens first, then 6 of its 20 tokens.
    s.add(3, vec![3; 20]);
    let p = step(&mut s);
    assert_eq!(
        p.seqs
            .iter()
            .map(|q| (q.id, q.tokens.len(), q.past))
            .collect::<Vec<_>>(),
        vec![(1, 1, 3), (2, 1, 3), (3, 6, 0)]
    );
    assert!(!p.seqs[2].sample, "a partial prefill does not sample");
    let p = step(&mut s);
    assert_eq!(p.seqs[2].past, 6);
    assert_eq!(p.seqs[2].tokens.len(), 6);
}

#[test]
fn fcfs_head_of_queue_is_not_overtaken() {
    let mut s = sched(4, 4, 64, 8);
    s.add(1, vec![1; 12]); // 3 blocks
    s.add(2, vec![2; 8]); // needs 2: does not fit next to 1
    s.add(3, vec![3; 2]); // would fit, but waits behind 2
    let p = step(&mut s);
    assert_eq!(p.seqs.iter().map(|q| q.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(s.num_waiting(), 2);
}

#[test]
fn a_repeated_prompt_starts_from_its_cached_prefix() {
    let mut s = sched(32, 4, 64, 8);
    let prompt: Vec<u32> = (0..18).collect();
    s.add(1, prompt.clone());
    step(&mut s);
    s.finish(1);
    s.add(2, prompt.clone());
    let p = step(&mut s);
    // 4 full blocks of 18 tokens are cached: only the last 2 tokens are computed.
    assert_eq!(p.seqs[0].past, 16);
    assert_eq!(p.seqs[0].tokens, vec![16, 17]);
    assert_eq!(s.cached_tokens(2), 16);
    // A prompt that is entirely cached still computes its last token.
    s.finish(2);
    s.add(3, (0..16).collect());
    let p = step(&mut s);
    assert_eq!((p.seqs[0].past, p.seqs[0].tokens.len()), (12, 4));
}

#[test]
fn the_newest_sequence_is_preempted_and_recomputed() {
    // 4 blocks of 2 tokens: two sequences of 3 tokens each fit, but not once both grow to 5.
    let mut s = sched(4, 2, 64, 8);
    s.add(1, vec![1; 3]);
    s.add(2, vec![2; 3]);
    step(&mut s);
    let p = step(&mut s); // both at 4 tokens: 4 blocks
    assert!(p.preempted.is_empty());
    let p = step(&mut s); // 1 needs a 3rd block: 2 is preempted
    assert_eq!(p.preempted, vec![2]);
    assert_eq!(p.seqs.iter().map(|q| q.id).collect::<Vec<_>>(), vec![1]);
    s.finish(1);
    // 2 comes back with its prompt and the tokens it generated, recomputed from position 0 (or
    // from its cached full blocks).
    let p = step(&mut s);
    assert_eq!(p.seqs[0].id, 2);
    assert_eq!(p.seqs[0].past + p.seqs[0].tokens.len(), 5);
    assert!(p.admitted.is_empty(), "re-admission is not a new admission");
}

#[test]
fn random_workloads_finish_without_leaks_or_overruns() {
    for seed in 0..100u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let bs = rng.random_range(1..8usize);
        let blocks = rng.random_range(8..40usize);
        let budget = rng.random_range(1..64usize);
        let max_seqs = rng.random_range(1..8usize);
        let mut s = sched(blocks, bs, budget, max_seqs);
        let cap = blocks * bs;
        // (id, tokens still to generate)
        let mut want: HashMap<SeqId, usize> = HashMap::new();
        let mut next = 0;
        let mut steps = 0;
        while (next < 30 || !want.is_empty()) && steps < 20_000 {
            if next < 30 && rng.random_bool(0.3) {
                let len = rng.random_range(1..cap / 2 + 2).min(cap - 1);
                let gen_n = rng.random_range(1..(cap - len).min(12) + 1);
                let family = rng.random_range(0..3u32);
                s.add(next, (0..len as u32).map(|i| family * 1000 + i).collect());
                want.insert(next, gen_n);
                next += 1;
            }
            let plan = step(&mut s);
            assert!(
                plan.tokens() <= budget,
                "seed {seed}: over the token budget"
            );
            assert!(plan.seqs.len() <= max_seqs, "seed {seed}: over max_seqs");
            assert!(s.num_running() <= max_seqs);
            for q in &plan.seqs {
                assert!(q.blocks.len() * bs >= q.past + q.tokens.len());
            }
            for q in plan.seqs.iter().filter(|q| q.sample) {
                let left = want.get_mut(&q.id).expect("known seq");
                *left -= 1;
                if *left == 0 {
                    want.remove(&q.id);
                    s.finish(q.id);
                }
            }
            s.blocks()
                .check()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            steps += 1;
        }
        assert!(
            want.is_empty(),
            "seed {seed}: {} sequences never finished",
            want.len()
        );
        assert_eq!(s.blocks().num_free(), blocks, "seed {seed}: leaked blocks");
    }
}

#[test]
fn drafts_are_verified_in_one_step_and_rejected_ones_rolled_back() {
    let mut s = sched(64, 4, 16, 8);
    s.add(1, vec![1, 2, 3, 4, 5]);
    step(&mut s); // prefill + first token (7)
    assert_eq!(
        s.blocks().slots(1),
        5,
        "the prompt; the sampled token has no slot yet"
    );
    // Decode with 5 drafts: last token + drafts in one row group, past = 5 computed.
    s.set_drafts(1, vec![8, 9, 10, 11, 12]);
    let p = s.schedule();
    assert_eq!(p.seqs.len(), 1);
    let q = &p.seqs[0];
    assert_eq!((q.past, q.drafts), (5, 5));
    assert_eq!(q.tokens, vec![7, 8, 9, 10, 11, 12]);
    assert!(q.sample && q.blocks.len() >= 3, "room for 11 positions");
    // Two drafts accepted, then the replacement 20: tokens grow by 3, computed stops before 20.
    s.update_many(&p, &[(1, vec![8, 9, 20])]);
    assert_eq!(s.tokens(1), &[1, 2, 3, 4, 5, 7, 8, 9, 20]);
    assert_eq!(s.blocks().slots(1), 9, "rejected drafts' slots released");
    assert_eq!(s.blocks().table(1).len(), 3);
    // The next step decodes from the replacement token, at position 8.
    let p = s.schedule();
    assert_eq!((p.seqs[0].past, p.seqs[0].tokens.clone()), (8, vec![20]));
    // Drafts that do not fit the token budget are cut to it.
    s.update(&p, &[(1, 21)]);
    s.set_drafts(1, vec![0; 40]);
    let p = s.schedule();
    assert_eq!(p.seqs[0].drafts, 15);
    s.update_many(&p, &[(1, vec![0, 0, 5])]);
    s.finish(1);
    s.blocks().check().expect("invariants");
    assert_eq!(s.blocks().num_used(), 0);
}
