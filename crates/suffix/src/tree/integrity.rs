//! Invariant checks (tests and debugging; they walk the whole tree).

use std::collections::{BTreeMap, HashMap};

use super::{SuffixTree, NIL, ROOT};

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

impl SuffixTree {
    /// Checks every structural invariant; returns a description of the first violation.
    ///
    /// Structure: parent/child/sibling links, the edge map, sibling order and runs, labels
    /// that resolve to stored tokens and agree with the path above them, the depth cap, and
    /// path compression (no non-root node has a single child with the same count).
    /// Counts: re-derived from scratch by walking every suffix of every indexed sequence.
    /// Storage: each slot's reference count equals the nodes naming it; removed slots are
    /// kept only while referenced; cached token and sequence totals.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut refs: HashMap<u32, u32> = HashMap::new();
        let mut reachable = 0usize;
        let mut stack = vec![(ROOT, Vec::<u32>::new())];
        while let Some((n, path)) = stack.pop() {
            reachable += 1;
            self.check_node(n, &path)?;
            if n != ROOT {
                *refs.entry(self.node(n).ref_seq).or_default() += 1;
            }
            let mut c = self.node(n).first_child;
            while c != NIL {
                let mut child_path = path.clone();
                child_path.extend_from_slice(self.label(c));
                stack.push((c, child_path));
                c = self.node(c).next_sib;
            }
        }
        ensure!(
            reachable == self.num_nodes(),
            "{reachable} reachable nodes, {} allocated",
            self.num_nodes()
        );
        ensure!(
            self.edges.len() == reachable - 1,
            "{} edges for {reachable} nodes",
            self.edges.len()
        );
        let (mut live_seqs, mut live_tokens) = (0, 0);
        for (i, slot) in self.seqs.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let want = refs.get(&(i as u32)).copied().unwrap_or(0);
            ensure!(
                slot.refs == want,
                "slot {i}: refs {} but {want} nodes",
                slot.refs
            );
            ensure!(
                slot.live || slot.refs > 0,
                "slot {i}: removed and unreferenced"
            );
            if slot.live {
                live_seqs += 1;
                live_tokens += slot.tokens.len();
            }
        }
        ensure!(live_seqs == self.live_seqs, "live sequence count");
        ensure!(live_tokens == self.live_tokens, "live token count");
        self.check_counts()
    }

    fn check_node(&self, n: u32, path: &[u32]) -> Result<(), String> {
        let node = self.node(n);
        ensure!(
            path.len() <= self.max_depth,
            "node {n}: depth {} over cap",
            path.len()
        );
        if n == ROOT {
            ensure!(node.parent == NIL && node.len == 0, "root shape");
        } else {
            ensure!(
                node.len > 0 && node.count > 0,
                "node {n}: empty or zero count"
            );
            let slot = self
                .seqs
                .get(node.ref_seq as usize)
                .and_then(Option::as_ref);
            ensure!(slot.is_some(), "node {n}: reference to a freed slot");
            let tokens = &slot.unwrap().tokens;
            let (start, end) = (node.ref_idx as usize, (node.ref_idx + self.len(n)) as usize);
            if node.len == super::OPEN {
                let owner = slot.unwrap();
                ensure!(
                    owner.live && !owner.sealed,
                    "node {n}: open leaf of a finished sequence"
                );
                ensure!(
                    node.count == 1 && node.first_child == NIL,
                    "node {n}: open but shared"
                );
            }
            ensure!(end <= tokens.len(), "node {n}: label past its sequence");
            ensure!(
                node.token == tokens[start],
                "node {n}: first token mismatch"
            );
            // The referenced occurrence must be preceded by the whole path above it.
            ensure!(
                end >= path.len(),
                "node {n}: occurrence shorter than its path"
            );
            ensure!(
                tokens[end - path.len()..end] == *path,
                "node {n}: referenced occurrence does not spell its path"
            );
            ensure!(
                self.child(node.parent, node.token) == Some(n),
                "node {n}: missing from the edge map"
            );
        }
        let mut c = node.first_child;
        let (mut prev, mut sum, mut kids) = (NIL, 0u64, 0u32);
        while c != NIL {
            let child = self.node(c);
            ensure!(child.parent == n, "node {c}: wrong parent");
            ensure!(child.prev_sib == prev, "node {c}: wrong prev sibling");
            ensure!(child.group != NIL, "node {c}: no group");
            let g = &self.groups[child.group as usize];
            if n != ROOT {
                ensure!(
                    child.count < node.count,
                    "node {c}: count not below parent's"
                );
            }
            if prev == NIL {
                ensure!(
                    g.head == c && g.prev == NIL,
                    "node {c}: first child heads no run"
                );
            } else {
                let p = self.node(prev);
                ensure!(child.count <= p.count, "node {c}: siblings out of order");
                if child.count == p.count {
                    ensure!(child.group == p.group, "node {c}: equal counts, other run");
                } else {
                    ensure!(g.head == c, "node {c}: run head");
                    ensure!(g.prev == p.group, "node {c}: run prev link");
                    ensure!(
                        self.groups[p.group as usize].next == child.group,
                        "run next link"
                    );
                }
            }
            if child.next_sib == NIL || self.node(child.next_sib).count != child.count {
                let next_group = if child.next_sib == NIL {
                    NIL
                } else {
                    self.node(child.next_sib).group
                };
                ensure!(g.next == next_group, "node {c}: run next at run end");
            }
            sum += u64::from(child.count);
            kids += 1;
            prev = c;
            c = child.next_sib;
        }
        ensure!(node.last_child == prev, "node {n}: wrong last child");
        ensure!(
            sum <= u64::from(node.count),
            "node {n}: children outnumber it"
        );
        if n != ROOT && kids == 1 {
            let only = self.node(node.first_child);
            ensure!(
                only.count < node.count,
                "node {n}: uncompressed single child"
            );
        }
        Ok(())
    }

    /// Group membership counts and the per-node counts, recomputed from the sequences.
    fn check_counts(&self) -> Result<(), String> {
        let mut members: HashMap<u32, u32> = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if i as u32 != ROOT && node.group != NIL && !self.free_nodes.contains(&(i as u32)) {
                *members.entry(node.group).or_default() += 1;
            }
        }
        for (&g, &m) in &members {
            ensure!(
                self.groups[g as usize].members == m,
                "group {g}: member count"
            );
        }
        let got = self.path_counts();
        for slot in self.seqs.iter().flatten().filter(|s| s.live) {
            let t = &slot.tokens;
            for start in 0..t.len() {
                let end = (start + self.max_depth).min(t.len());
                ensure!(
                    got.contains_key(&t[start..end]),
                    "suffix at {start} does not end at a node"
                );
            }
        }
        let want = self.expected_counts();
        ensure!(
            want == got,
            "node counts differ from a recount of the sequences"
        );
        Ok(())
    }

    /// Count of every node, keyed by its full path, recomputed by brute force from the
    /// indexed sequences (only at node boundaries of this tree).
    fn expected_counts(&self) -> BTreeMap<Vec<u32>, u32> {
        let got = self.path_counts();
        let mut want: BTreeMap<Vec<u32>, u32> = got.keys().map(|k| (k.clone(), 0)).collect();
        for slot in self.seqs.iter().flatten().filter(|s| s.live) {
            let t = &slot.tokens;
            for start in 0..t.len() {
                let end = (start + self.max_depth).min(t.len());
                for stop in start..=end {
                    if let Some(c) = want.get_mut(&t[start..stop]) {
                        *c += 1;
                    }
                }
            }
        }
        want
    }

    /// Every node's full path mapped to its count: the tree's content, independent of sibling
    /// order among ties and of which sequence a label references.
    pub fn path_counts(&self) -> BTreeMap<Vec<u32>, u32> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT, Vec::new())];
        while let Some((n, path)) = stack.pop() {
            let mut c = self.node(n).first_child;
            while c != NIL {
                let mut p = path.clone();
                p.extend_from_slice(self.label(c));
                stack.push((c, p));
                c = self.node(c).next_sib;
            }
            out.insert(path, self.node(n).count);
        }
        out
    }
}
