//! The naive reference's tie handling, which the Arctic comparison relies on to explain
//! differing steps, accepts every tie-break and nothing else.

mod common;

use common::{drafter_path_valid, Naive};
use wring_suffix::{Draft, SuffixConfig, SuffixDrafter};

fn draft(tokens: &[u32], probs: &[f32], match_len: usize) -> Draft {
    Draft {
        tokens: tokens.to_vec(),
        probs: probs.to_vec(),
        parents: (0..tokens.len() as i32).map(|i| i - 1).collect(),
        score: probs.iter().sum(),
        match_len,
    }
}

#[test]
fn ties_are_explained_and_nothing_else() {
    let cfg = SuffixConfig::default();
    let responses: Vec<Vec<u32>> = vec![vec![1, 2, 3], vec![1, 2, 4]];
    let ctx = vec![7, 1, 2];
    let own = Naive {
        seqs: vec![&ctx],
        depth: cfg.max_tree_depth,
    };
    let global = Naive {
        seqs: responses.iter().map(Vec::as_slice).collect(),
        depth: cfg.max_tree_depth,
    };
    let valid = |d: &Draft| drafter_path_valid(&own, &global, &cfg, &ctx, 4, d);
    // "1 2" continues with 3 or 4, once each: either is a correct draft.
    assert!(valid(&draft(&[3], &[0.5], 2)));
    assert!(valid(&draft(&[4], &[0.5], 2)));
    assert!(
        !valid(&draft(&[5], &[0.5], 2)),
        "a token that never follows"
    );
    assert!(!valid(&draft(&[3], &[1.0], 2)), "a wrong probability");
    assert!(
        !valid(&draft(&[3], &[0.5], 1)),
        "equal scores go to the longer match"
    );
    assert!(
        !valid(&draft(&[], &[], 2)),
        "an empty draft where one exists"
    );

    let mut d = SuffixDrafter::new(cfg.clone());
    for (id, r) in responses.iter().enumerate() {
        d.start_request(id as u64, &[0]).unwrap();
        d.append(id as u64, r).unwrap();
        d.stop_request(id as u64).unwrap();
    }
    d.start_request(9, &ctx).unwrap();
    assert!(valid(&d.speculate(9, 4).unwrap()));
}
