//! Suffix-tree drafter (see issue 3).
