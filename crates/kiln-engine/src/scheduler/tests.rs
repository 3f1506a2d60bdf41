//! Scheduler rules, exercised without a model: budget, chunking, admission, preemption,
//! priority.

use super::*;

fn sched(num_blocks: usize, budget: usize, max_seqs: usize) -> Scheduler {
    Scheduler::new(
        SchedulerConfig {
            max_num_batched_tokens: budget,
            max_num_seqs: max_seqs,
            background_step_tokens: 1000,
            max_model_len: 4096,
            max_prompt_logprob_rows: 8,
        },
        KvManager::new(num_blocks, 4, true),
    )
}

fn add(s: &mut Scheduler, id: SeqId, prompt_len: usize, priority: i32) {
    let seq = Sequence {
        id,
        priority,
        arrival: 0,
        // Distinct tokens per id so prefixes don't collide across tests' sequences.
        tokens: (0..prompt_len as u32)
            .map(|t| t + 1000 * id as u32)
            .collect(),
        num_prompt_tokens: prompt_len,
        num_computed_tokens: 0,
        cache_key: Vec::new(),
        adapter: None,
        blocks: s.kv.new_seq(64),
        num_cached_tokens: 0,
        num_preemptions: 0,
        prompt_leader: None,
        prompt_logprobs: None,
        prompt_logprob_next: 1,
        draft: Vec::new(),
    };
    s.add(seq);
}

/// What the engine does after a step: computed tokens advance; caught-up sequences get
/// one new token.
fn apply(s: &mut Scheduler, out: &SchedulerOutput) {
    for sc in &out.scheduled {
        let seq = &mut s.running_mut()[sc.running_index];
        seq.num_computed_tokens += sc.num_new_tokens;
        if seq.num_computed_tokens == seq.tokens.len() {
            seq.tokens.push(7);
        }
    }
}

fn step(s: &mut Scheduler) -> Vec<(SeqId, usize)> {
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    apply(s, &out);
    out.scheduled
        .iter()
        .map(|x| (x.seq_id, x.num_new_tokens))
        .collect()
}

#[test]
fn long_prompt_is_chunked_to_the_budget() {
    let mut s = sched(64, 8, 8);
    add(&mut s, 1, 20, 0);
    assert_eq!(step(&mut s), vec![(1, 8)]);
    assert_eq!(step(&mut s), vec![(1, 8)]);
    assert_eq!(step(&mut s), vec![(1, 4)]);
    assert_eq!(step(&mut s), vec![(1, 1)], "then decodes");
}

#[test]
fn decodes_go_first_and_prefill_takes_the_rest() {
    let mut s = sched(64, 8, 8);
    add(&mut s, 1, 3, 0);
    add(&mut s, 2, 3, 0);
    assert_eq!(step(&mut s), vec![(1, 3), (2, 3)]);
    add(&mut s, 3, 30, 0);
    // Both decodes are served every step while the long prompt is chunked around them.
    for _ in 0..4 {
        let got = step(&mut s);
        assert_eq!(&got[..2], &[(1, 1), (2, 1)]);
        assert_eq!(got[2].0, 3);
        assert!(got[2].1 <= 6);
    }
}

#[test]
fn max_num_seqs_caps_admission() {
    let mut s = sched(64, 100, 2);
    for id in 1..=3 {
        add(&mut s, id, 2, 0);
    }
    assert_eq!(step(&mut s).len(), 2);
    assert_eq!(s.num_waiting(), 1);
    s.remove(1);
    let got = step(&mut s);
    assert!(got.contains(&(3, 2)), "{got:?}");
}

#[test]
fn admission_waits_for_free_blocks() {
    // 4 blocks of 4 tokens: a 12-token prompt takes 3, so a second one can't fit.
    let mut s = sched(4, 100, 8);
    add(&mut s, 1, 12, 0);
    add(&mut s, 2, 12, 0);
    assert_eq!(step(&mut s), vec![(1, 12)]);
    assert_eq!(s.num_waiting(), 1);
    s.remove(1);
    assert_eq!(s.kv.num_free_blocks(), 4, "removal released the blocks");
    assert_eq!(step(&mut s), vec![(2, 12)]);
}

#[test]
fn newest_is_preempted_and_resumes_later() {
    // 4 blocks; two sequences of 7 tokens hold 2 blocks each. When the older one needs a
    // third block, the newer one is preempted (recompute) and comes back when space frees.
    let mut s = sched(4, 100, 8);
    add(&mut s, 1, 7, 0);
    add(&mut s, 2, 7, 0);
    assert_eq!(step(&mut s), vec![(1, 7), (2, 7)]);
    // Both now have 8 tokens (7 computed); decoding token 8 fits in block 2.
    assert_eq!(step(&mut s), vec![(1, 1), (2, 1)]);
    // Token 9 needs a third block for each: 1 gets it by preempting 2.
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    assert_eq!(out.preempted, vec![2]);
    assert_eq!(out.scheduled.len(), 1);
    assert_eq!(out.scheduled[0].seq_id, 1);
    apply(&mut s, &out);
    assert_eq!(s.num_waiting(), 1);
    s.remove(1);
    // The preempted sequence recomputes its prompt and its generated tokens.
    let got = step(&mut s);
    assert_eq!(got, vec![(2, 9)]);
}

#[test]
fn lower_priority_value_runs_first() {
    let mut s = sched(64, 100, 1);
    add(&mut s, 1, 2, 5);
    add(&mut s, 2, 2, 0);
    assert_eq!(step(&mut s), vec![(2, 2)]);
}

#[test]
fn fcfs_within_a_priority() {
    let mut s = sched(64, 4, 8);
    for id in 1..=3 {
        add(&mut s, id, 4, 0);
    }
    assert_eq!(step(&mut s), vec![(1, 4)]);
    // 1 decodes (1 token); 2 gets the other 3; 3 still waits its turn.
    assert_eq!(step(&mut s), vec![(1, 1), (2, 3)]);
}

#[test]
fn prefix_hit_skips_cached_blocks() {
    let mut s = sched(64, 100, 8);
    add(&mut s, 1, 10, 0);
    step(&mut s);
    // Commit what sequence 1 computed, as the engine does after a step.
    let toks = s.running[0].tokens.clone();
    let n = s.running[0].num_computed_tokens;
    s.kv.commit(&mut s.running[0].blocks, &toks, n, b"");
    // Same prompt under another id: 8 of 10 tokens (two full blocks) come from the cache.
    let seq = Sequence {
        id: 9,
        priority: 0,
        arrival: 0,
        tokens: toks[..10].to_vec(),
        num_prompt_tokens: 10,
        num_computed_tokens: 0,
        cache_key: Vec::new(),
        adapter: None,
        blocks: s.kv.new_seq(64),
        num_cached_tokens: 0,
        num_preemptions: 0,
        prompt_leader: None,
        prompt_logprobs: None,
        prompt_logprob_next: 1,
        draft: Vec::new(),
    };
    s.add(seq);
    let got = step(&mut s);
    assert!(got.contains(&(9, 2)), "{got:?}");
}

#[test]
fn siblings_wait_for_the_leaders_prompt_and_reuse_it() {
    let mut s = sched(64, 100, 8);
    let prompt: Vec<u32> = (0..20).collect();
    for (id, leader) in [(1, None), (2, Some(1)), (3, Some(1))] {
        let seq = Sequence {
            id,
            priority: 0,
            arrival: 0,
            tokens: prompt.clone(),
            num_prompt_tokens: 20,
            num_computed_tokens: 0,
            cache_key: Vec::new(),
            adapter: None,
            blocks: s.kv.new_seq(64),
            num_cached_tokens: 0,
            num_preemptions: 0,
            prompt_leader: leader,
            prompt_logprobs: None,
            prompt_logprob_next: 1,
            draft: Vec::new(),
        };
        s.add(seq);
    }
    assert_eq!(
        step(&mut s),
        vec![(1, 20)],
        "siblings wait for the leader's prompt"
    );
    let toks = s.running[0].tokens.clone();
    s.kv.commit(&mut s.running[0].blocks, &toks, 20, b"");
    // Both siblings reuse the 16 cached prompt tokens (one full block) and compute 4.
    let got = step(&mut s);
    assert_eq!(got, vec![(1, 1), (2, 4), (3, 4)]);
}

#[test]
fn prompt_logprob_sequences_skip_the_cache_and_fit_the_logits_rows() {
    let mut s = sched(64, 100, 8);
    add(&mut s, 1, 10, 0);
    step(&mut s);
    let toks = s.running[0].tokens.clone();
    let n = s.running[0].num_computed_tokens;
    s.kv.commit(&mut s.running[0].blocks, &toks, n, b"");
    // The same prompt twice more, both asking for prompt log-probabilities: no cache hit,
    // and together they get at most 8 prompt rows a step (the sched() limit).
    for id in [7, 8] {
        let seq = Sequence {
            id,
            priority: 0,
            arrival: 0,
            tokens: toks[..10].to_vec(),
            num_prompt_tokens: 10,
            num_computed_tokens: 0,
            cache_key: Vec::new(),
            adapter: None,
            blocks: s.kv.new_seq(64),
            num_cached_tokens: 0,
            num_preemptions: 0,
            prompt_leader: None,
            prompt_logprobs: Some(2),
            prompt_logprob_next: 1,
            draft: Vec::new(),
        };
        s.add(seq);
    }
    let got = step(&mut s);
    assert_eq!(got, vec![(1, 1), (7, 8)], "decode, then 8 prompt rows");
    let seven = s
        .running
        .iter()
        .find(|q| q.id == 7)
        .map(|q| q.num_cached_tokens);
    assert_eq!(seven, Some(0), "no prefix-cache hit");
    // The engine marks reported positions; once 7's prompt is done, 8 gets rows.
    for q in s.running.iter_mut().filter(|q| q.id == 7) {
        q.prompt_logprob_next = 9;
    }
    let got = step(&mut s);
    assert_eq!(got, vec![(1, 1), (7, 2), (8, 6)], "{got:?}");
}

#[test]
fn urgent_waiting_sequence_preempts_a_less_urgent_one_for_a_slot() {
    let mut s = sched(64, 100, 2);
    add(&mut s, 1, 4, 10);
    add(&mut s, 2, 4, 10);
    step(&mut s);
    add(&mut s, 3, 4, 0);
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    // The newest batch sequence gives its slot up; the other keeps its slot and
    // decodes again once the urgent prompt is computed.
    assert_eq!(out.preempted, vec![2]);
    let got: Vec<_> = out
        .scheduled
        .iter()
        .map(|x| (x.seq_id, x.num_new_tokens))
        .collect();
    assert_eq!(got, vec![(3, 4)]);
    assert_eq!(s.num_waiting(), 1);
}

#[test]
fn urgent_waiting_sequence_preempts_a_less_urgent_one_for_blocks() {
    // 4 blocks of 4 tokens: two 7-token batch prompts (and their first tokens) take
    // them all.
    let mut s = sched(4, 100, 8);
    add(&mut s, 1, 7, 10);
    add(&mut s, 2, 7, 10);
    assert_eq!(step(&mut s), vec![(1, 7), (2, 7)]);
    add(&mut s, 3, 4, 0);
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    assert!(out.scheduled.iter().any(|x| x.seq_id == 3));
    assert!(!out.preempted.is_empty());
    assert!(!out.preempted.contains(&3));
}

#[test]
fn equal_priority_never_preempts_for_admission() {
    let mut s = sched(64, 100, 1);
    add(&mut s, 1, 4, 0);
    step(&mut s);
    add(&mut s, 2, 4, 0);
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    assert!(out.preempted.is_empty());
    assert_eq!(out.scheduled.len(), 1);
    assert_eq!(out.scheduled[0].seq_id, 1);
}

#[test]
fn urgent_prefill_step_carries_no_less_urgent_work() {
    let mut s = sched(64, 100, 8);
    add(&mut s, 1, 4, 10);
    step(&mut s);
    // A long batch prompt is mid-prefill when an urgent one arrives.
    add(&mut s, 2, 40, 10);
    s.config.max_num_batched_tokens = 11;
    assert_eq!(step(&mut s), vec![(1, 1), (2, 10)]);
    s.config.max_num_batched_tokens = 100;
    add(&mut s, 3, 6, 0);
    // The urgent prompt's step carries no batch work: decodes and prefill wait it out.
    assert_eq!(step(&mut s), vec![(3, 6)]);
    // Then the batch prompt resumes beside the urgent decode.
    assert_eq!(step(&mut s), vec![(3, 1), (1, 1), (2, 30)]);
}

#[test]
fn less_urgent_waiting_sequences_wait_for_urgent_prompts() {
    let mut s = sched(64, 100, 8);
    add(&mut s, 1, 6, 0);
    add(&mut s, 2, 6, 10);
    // Only the urgent prompt is computed in its step, though budget is left.
    assert_eq!(step(&mut s), vec![(1, 6)]);
    assert_eq!(step(&mut s), vec![(1, 1), (2, 6)]);
}

#[test]
fn background_steps_are_short_while_urgent_work_is_about() {
    let mut s = sched(64, 100, 8);
    s.config.background_step_tokens = 4;
    for id in 1..=3 {
        add(&mut s, id, 3, 10);
    }
    // No urgent work: background sequences fill the step.
    assert_eq!(step(&mut s), vec![(1, 3), (2, 3), (3, 3)]);
    add(&mut s, 4, 2, 0);
    // The urgent prompt's step carries no background work.
    assert_eq!(step(&mut s), vec![(4, 2)]);
    // While it decodes, background sequences share 4 tokens a step, oldest first.
    assert_eq!(step(&mut s), vec![(4, 1), (1, 1), (2, 1), (3, 1)]);
    s.remove(4);
    // Within the window after it left, steps stay short...
    for _ in 0..URGENT_WINDOW_STEPS {
        assert_eq!(step(&mut s).len(), 3);
    }
    // ...then background work fills them again.
    add(&mut s, 5, 20, 10);
    assert_eq!(step(&mut s), vec![(1, 1), (2, 1), (3, 1), (5, 20)]);
}

#[test]
fn a_draft_runs_as_extra_rows_when_blocks_and_budget_allow() {
    let mut s = sched(16, 64, 4);
    add(&mut s, 1, 4, 0);
    step(&mut s);
    s.running_mut()[0].draft.extend_from_slice(&[5, 6, 7]);
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    assert_eq!(out.scheduled[0].num_new_tokens, 4, "the token and 3 drafts");
    // A budget of 2 rows cuts the draft to 1 token.
    let mut s = sched(16, 2, 4);
    add(&mut s, 1, 2, 0);
    step(&mut s);
    s.running_mut()[0].draft.extend_from_slice(&[5, 6, 7]);
    s.schedule(&mut out);
    assert_eq!(out.scheduled[0].num_new_tokens, 2);
    assert_eq!(s.running()[0].draft, [5]);
}

#[test]
fn a_draft_never_takes_the_blocks_another_sequence_needs() {
    // 4 blocks of 4: two sequences of 4 prompt tokens take one block each and each needs
    // one more for its next token; a draft of 5 would take both free blocks.
    let mut s = sched(4, 64, 4);
    add(&mut s, 1, 4, 0);
    add(&mut s, 2, 4, 0);
    step(&mut s);
    s.running_mut()[0].draft.extend_from_slice(&[5, 6, 7, 8, 9]);
    let mut out = SchedulerOutput::default();
    s.schedule(&mut out);
    assert!(out.preempted.is_empty(), "{:?}", out.preempted);
    assert_eq!(out.scheduled[0].num_new_tokens, 1, "the draft was dropped");
    assert!(s.running()[0].draft.is_empty());
}
