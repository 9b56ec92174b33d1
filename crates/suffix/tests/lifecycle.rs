//! Request lifecycle, eviction, batch API and bad input.

use wring_suffix::{DraftMode, DrafterError, SuffixConfig, SuffixDrafter};

fn drafter(cfg: SuffixConfig) -> SuffixDrafter {
    SuffixDrafter::try_new(cfg).unwrap()
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<SuffixDrafter>();
};

#[test]
fn bad_requests_get_errors_and_change_nothing() {
    let mut d = drafter(SuffixConfig {
        vocab_size: Some(100),
        ..SuffixConfig::default()
    });
    assert_eq!(d.append(7, &[1]), Err(DrafterError::UnknownRequest(7)));
    assert_eq!(d.speculate(7, 4), Err(DrafterError::UnknownRequest(7)));
    assert_eq!(d.stop_request(7), Err(DrafterError::UnknownRequest(7)));
    assert_eq!(d.abort_request(7), Err(DrafterError::UnknownRequest(7)));
    assert_eq!(d.start_request(1, &[]), Err(DrafterError::EmptyPrompt(1)));
    assert!(matches!(
        d.start_request(1, &[5, 100]),
        Err(DrafterError::OutOfVocabulary {
            token: 100,
            position: 1,
            ..
        })
    ));
    assert_eq!(d.num_active(), 0);
    d.start_request(1, &[1, 2, 3]).unwrap();
    assert_eq!(
        d.start_request(1, &[1]),
        Err(DrafterError::AlreadyActive(1))
    );
    assert!(matches!(
        d.append(1, &[4, 4000]),
        Err(DrafterError::OutOfVocabulary { token: 4000, .. })
    ));
    assert_eq!(d.request_tokens(1), Some(vec![1, 2, 3]));
    assert_eq!(d.global_cached_tokens(), 0);
    d.stop_request(1).unwrap();
    assert_eq!(d.stop_request(1), Err(DrafterError::UnknownRequest(1)));
    d.check_integrity().unwrap();
}

#[test]
fn invalid_config_is_rejected_or_clamped() {
    for bad in [
        SuffixConfig {
            max_tree_depth: 0,
            ..SuffixConfig::default()
        },
        SuffixConfig {
            max_spec_factor: f32::NAN,
            ..SuffixConfig::default()
        },
        SuffixConfig {
            max_spec_factor: -1.0,
            ..SuffixConfig::default()
        },
        SuffixConfig {
            vocab_size: Some(0),
            ..SuffixConfig::default()
        },
    ] {
        assert!(matches!(
            SuffixDrafter::try_new(bad.clone()),
            Err(DrafterError::InvalidConfig(_))
        ));
        let d = SuffixDrafter::new(bad);
        d.config().validate().unwrap();
    }
}

#[test]
fn own_output_is_drafted_and_stop_keeps_it_abort_drops_it() {
    let mut d = drafter(SuffixConfig::default());
    d.start_request(1, &[10, 11, 12, 13, 10, 11]).unwrap();
    let draft = d.speculate(1, 4).unwrap();
    assert_eq!(draft.tokens, vec![12, 13]); // matched [10, 11]: cap 2
    d.append(1, &[20, 21, 22]).unwrap();
    assert_eq!(d.global_cached_tokens(), 3);
    d.stop_request(1).unwrap();
    assert_eq!(d.global_cached_tokens(), 3);

    d.start_request(2, &[5, 20, 21]).unwrap();
    assert_eq!(d.speculate(2, 4).unwrap().tokens, vec![22]); // from request 1's response
    d.append(2, &[30, 31]).unwrap();
    assert_eq!(d.global_cached_tokens(), 5);
    d.abort_request(2).unwrap();
    assert_eq!(d.global_cached_tokens(), 3);
    d.check_integrity().unwrap();
}

#[test]
fn eviction_by_request_count_is_fifo() {
    let mut d = drafter(SuffixConfig {
        max_cached_requests: Some(2),
        ..SuffixConfig::default()
    });
    for id in 0..3u64 {
        d.start_request(id, &[1]).unwrap();
        d.append(id, &[100 + id as u32; 4]).unwrap();
        d.stop_request(id).unwrap();
    }
    assert_eq!(d.global_cached_requests(), 2);
    assert_eq!(d.global_cached_tokens(), 8);
    let seqs: Vec<Vec<u32>> = d.global_tree().sequences().map(<[u32]>::to_vec).collect();
    assert!(
        !seqs.contains(&vec![100; 4]),
        "oldest response survived: {seqs:?}"
    );
    d.check_integrity().unwrap();
}

#[test]
fn eviction_by_token_budget_bounds_memory() {
    let budget = 1000;
    let mut d = drafter(SuffixConfig {
        max_cached_tokens: Some(budget),
        max_tree_depth: 32,
        ..SuffixConfig::default()
    });
    let mut peak = 0;
    let mut state = 12345u64;
    for id in 0..60u64 {
        d.start_request(id, &[1, 2, 3]).unwrap();
        let out: Vec<u32> = (0..97)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 59) as u32
            })
            .collect();
        d.append(id, &out).unwrap();
        d.stop_request(id).unwrap();
        assert!(d.global_cached_tokens() <= budget);
        peak = peak.max(d.global_memory_bytes());
    }
    d.check_integrity().unwrap();
    assert!(d.global_cached_tokens() > budget - 97);
    // Memory stays bounded: arenas are reused after eviction, not grown.
    assert!(
        peak < 400 * budget,
        "peak {peak} bytes for a {budget}-token budget"
    );
    // A single response larger than the whole budget is not cached at all.
    d.start_request(99, &[1]).unwrap();
    d.append(99, &vec![7; budget + 1]).unwrap();
    assert!(d.global_cached_tokens() <= budget);
    d.abort_request(99).unwrap();
    d.reset_global();
    assert_eq!(d.global_cached_tokens(), 0);
    assert_eq!(d.global_tree().num_nodes(), 1);
    d.check_integrity().unwrap();
}

#[test]
fn batch_equals_one_by_one() {
    let mut d = drafter(SuffixConfig::default());
    for id in 0..200u64 {
        let prompt: Vec<u32> = (0..40).map(|i| ((i * (id + 3)) % 11) as u32).collect();
        d.start_request(id, &prompt).unwrap();
    }
    // 16 requests (one thread) and 200 (split across rayon tasks).
    for n in [16u64, 200] {
        let mut reqs: Vec<(u64, usize)> = (0..n).map(|id| (id, 2 + id as usize % 7)).collect();
        reqs.insert(3, (999, 4));
        check_batch(&mut d, &reqs);
    }
}

fn check_batch(d: &mut SuffixDrafter, reqs: &[(u64, usize)]) {
    for mode in [DraftMode::Path, DraftMode::Tree] {
        let batch = d.speculate_batch_mode(reqs, mode);
        assert_eq!(batch.len(), reqs.len());
        for (&(id, k), got) in reqs.iter().zip(&batch) {
            assert_eq!(got, &d.speculate_mode(id, k, mode));
        }
        assert_eq!(batch[3], Err(DrafterError::UnknownRequest(999)));
        assert!(batch.iter().flatten().any(|r| !r.is_empty()));
    }
}

#[test]
fn reset_keeps_active_requests_caching() {
    let mut d = drafter(SuffixConfig::default());
    d.start_request(1, &[1, 2]).unwrap();
    d.append(1, &[3, 4]).unwrap();
    d.reset_global();
    assert_eq!(d.global_cached_tokens(), 0);
    d.append(1, &[5]).unwrap();
    assert_eq!(d.global_cached_tokens(), 1);
    d.check_integrity().unwrap();
}

/// A deterministic stream of lifecycle calls over a few requests.
fn drive(d: &mut SuffixDrafter, round: u64) {
    let id = round % 5;
    let tokens: Vec<u32> = (0..(round % 4 + 1))
        .map(|i| ((round * 7 + i) % 9) as u32)
        .collect();
    match round % 11 {
        0 if round > 0 => {
            let _ = d.stop_request(id);
        }
        5 => {
            let _ = d.abort_request(id);
        }
        10 if round % 33 == 10 => d.reset_global(),
        _ => {
            if !d.is_active(id) {
                d.start_request(id, &[1, 2, 3, id as u32]).unwrap();
            }
            d.append(id, &tokens).unwrap();
        }
    }
}

#[test]
fn deferred_mode_catches_up_to_the_immediate_one() {
    let cfg = SuffixConfig {
        max_cached_tokens: Some(60),
        ..SuffixConfig::default()
    };
    let mut now = drafter(cfg.clone());
    let mut later = drafter(cfg);
    later.enable_deferred_global();
    for round in 0..300u64 {
        drive(&mut now, round);
        drive(&mut later, round);
        if round % 3 == 2 {
            later.catch_up();
            assert_eq!(
                now.global_tree().path_counts(),
                later.global_tree().path_counts()
            );
            assert_eq!(now.global_cached_requests(), later.global_cached_requests());
            for id in 0..5 {
                assert_eq!(now.request_tokens(id), later.request_tokens(id));
                assert_eq!(now.speculate(id, 4), later.speculate(id, 4));
            }
            later.check_integrity().unwrap();
        }
    }
}

#[test]
fn deferred_drafts_see_queued_tokens_and_the_work_adds_them() {
    let mut d = drafter(SuffixConfig::default());
    d.enable_deferred_global();
    d.start_request(1, &[7, 8, 9, 7, 8]).unwrap();
    // Even the prompt waits for the work.
    let unindexed = d.active_memory_bytes();
    assert!(d.speculate_batch(&[(1, 2)])[0].as_ref().unwrap().is_empty());
    d.take_global_work().expect("start queued").run();
    assert!(
        d.active_memory_bytes() > unindexed,
        "the work indexed the prompt"
    );
    d.append(1, &[9, 7]).unwrap();
    assert_eq!(d.request_tokens(1), Some(vec![7, 8, 9, 7, 8, 9, 7]));
    // The draft follows the queued "9 7" down the prompt's "7 8 9 7 8": "8" ends it.
    let drafts = d.speculate_batch(&[(1, 2)]);
    assert_eq!(drafts[0].as_ref().unwrap().tokens, vec![8]);
    assert_eq!(d.global_cached_tokens(), 0);
    let work = d.take_global_work().expect("appends queued");
    assert!(d.take_global_work().is_none());
    std::thread::spawn(move || work.run()).join().unwrap();
    assert_eq!(d.global_cached_tokens(), 2);
    assert_eq!(d.global_cached_requests(), 1);
    assert!(
        d.active_memory_bytes() > unindexed,
        "the work indexed the prompt"
    );
    assert_eq!(d.request_tokens(1), Some(vec![7, 8, 9, 7, 8, 9, 7]));
    assert!(d.speculate_batch(&[(1, 2)])[0].is_ok());
    d.check_integrity().unwrap();
}
