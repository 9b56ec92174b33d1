//! A depth-capped, path-compressed suffix tree over several token sequences.
//!
//! Every suffix of every sequence, truncated to `max_depth` tokens, is a path from the root.
//! Edges do not copy tokens: a node names an occurrence of its label in a stored sequence
//! (`ref_seq`, `ref_idx`). Each node counts the suffixes that pass through or end at it;
//! siblings are kept in a doubly linked list ordered by decreasing count (with runs of equal
//! counts grouped), so the most frequent continuation is always `first_child`.
//!
//! A leaf that only one growing suffix reaches is "open" (as in Ukkonen's algorithm): its
//! label ends wherever its sequence currently ends, so appending a token costs nothing for
//! it. It is closed (given a fixed length) when another suffix enters it, when its suffix
//! reaches the depth cap, or when its sequence is sealed or removed.
//!
//! Removal never rewrites references: a removed sequence's tokens stay stored (but no longer
//! counted as cached) while some node still names them, and are freed when the last such node
//! goes. Nodes prefer to reference the most recently added sequence that passes through them, so
//! under oldest-first eviction the storage of an evicted sequence is normally freed at once.

mod hash;
mod integrity;
mod order;
mod speculate;

pub use speculate::SpecParams;

use std::collections::VecDeque;

pub(crate) use hash::EdgeHasher;
use hash::{edge_key, EdgeMap};

pub(crate) const NIL: u32 = u32::MAX;
const ROOT: u32 = 0;
/// `Node::len` of an open leaf: its label runs to the current end of its sequence.
const OPEN: u32 = u32::MAX;
/// Window entries whose node is an open leaf carry this bit (node ids stay below it).
const OPEN_ENTRY: u32 = 1 << 31;
/// Most tokens one tree indexes (keeps node ids below `OPEN_ENTRY`).
pub const MAX_TREE_TOKENS: usize = 1 << 29;

/// Handle of a sequence inside one tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub(crate) u32);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    /// Suffixes that pass through or end at this node.
    count: u32,
    /// First token of the edge label (the key under which the parent finds this node).
    token: u32,
    /// Edge label length in tokens (0 only for the root), or `OPEN` for an open leaf.
    len: u32,
    /// The label is `seqs[ref_seq].tokens[ref_idx .. ref_idx + len]`.
    ref_seq: u32,
    ref_idx: u32,
    parent: u32,
    first_child: u32,
    last_child: u32,
    next_sib: u32,
    prev_sib: u32,
    /// Run of equal-count siblings this node belongs to (index into `groups`).
    group: u32,
}

impl Node {
    fn new(count: u32, token: u32, len: u32, parent: u32) -> Self {
        Self {
            count,
            token,
            len,
            ref_seq: NIL,
            ref_idx: 0,
            parent,
            first_child: NIL,
            last_child: NIL,
            next_sib: NIL,
            prev_sib: NIL,
            group: NIL,
        }
    }
}

/// A maximal run of consecutive siblings with the same count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Group {
    head: u32,
    next: u32,
    prev: u32,
    members: u32,
}

#[derive(Debug, Default)]
struct SeqSlot {
    tokens: Vec<u32>,
    /// Nodes where this sequence's still-growing suffixes end (at most `max_depth`), oldest
    /// first. Entries flagged `OPEN_ENTRY` end at open leaves: leaves only that suffix reaches,
    /// whose label implicitly grows with the sequence, so appends skip them.
    window: VecDeque<u32>,
    /// Open leaves of this sequence closed by other suffixes since its last append.
    closed_since: u32,
    /// Still indexed in the tree (false once removed; storage may outlive it, see module docs).
    live: bool,
    /// No more appends expected: the window has been dropped.
    sealed: bool,
    /// Insertion order; nodes prefer references into higher ranks.
    rank: u64,
    /// Nodes whose label references this slot.
    refs: u32,
}

/// Suffix tree over a set of sequences. See the module docs.
#[derive(Debug)]
pub struct SuffixTree {
    max_depth: usize,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    edges: EdgeMap,
    seqs: Vec<Option<SeqSlot>>,
    free_seqs: Vec<u32>,
    next_rank: u64,
    live_seqs: usize,
    live_tokens: usize,
}

impl SuffixTree {
    pub fn new(max_depth: usize) -> Self {
        let mut root = Node::new(0, 0, 0, NIL);
        root.ref_idx = NIL;
        Self {
            max_depth: max_depth.max(1),
            nodes: vec![root],
            free_nodes: Vec::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            edges: EdgeMap::default(),
            seqs: Vec::new(),
            free_seqs: Vec::new(),
            next_rank: 0,
            live_seqs: 0,
            live_tokens: 0,
        }
    }

    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Sequences currently indexed.
    pub fn num_seqs(&self) -> usize {
        self.live_seqs
    }

    /// Tokens of all indexed sequences.
    pub fn num_tokens(&self) -> usize {
        self.live_tokens
    }

    /// Nodes in the tree, root included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - self.free_nodes.len()
    }

    /// Starts a new, empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        let slot = SeqSlot {
            live: true,
            rank: self.next_rank,
            ..SeqSlot::default()
        };
        self.next_rank += 1;
        self.live_seqs += 1;
        match self.free_seqs.pop() {
            Some(i) => {
                self.seqs[i as usize] = Some(slot);
                SeqId(i)
            }
            None => {
                self.seqs.push(Some(slot));
                SeqId(self.seqs.len() as u32 - 1)
            }
        }
    }

    fn live_slot(&self, seq: SeqId) -> Option<&SeqSlot> {
        self.seqs
            .get(seq.0 as usize)
            .and_then(Option::as_ref)
            .filter(|s| s.live)
    }

    pub fn contains(&self, seq: SeqId) -> bool {
        self.live_slot(seq).is_some()
    }

    /// Tokens of an indexed sequence.
    pub fn tokens(&self, seq: SeqId) -> Option<&[u32]> {
        self.live_slot(seq).map(|s| s.tokens.as_slice())
    }

    /// Tokens of every indexed sequence (in slot order).
    pub fn sequences(&self) -> impl Iterator<Item = &[u32]> {
        self.seqs
            .iter()
            .flatten()
            .filter(|s| s.live)
            .map(|s| s.tokens.as_slice())
    }

    /// Where the growing suffixes of an unsealed sequence end, oldest (longest) first: entry
    /// `len - m` is the node at whose end the sequence's last `m` tokens end.
    /// (Entries may carry the `OPEN_ENTRY` flag.)
    fn window(&self, seq: SeqId) -> Option<&VecDeque<u32>> {
        self.live_slot(seq).filter(|s| !s.sealed).map(|s| &s.window)
    }

    /// Marks a sequence as finished: it stays indexed but takes no more tokens, and its
    /// window of growing suffixes is released. Returns false for an unknown sequence.
    pub fn seal(&mut self, seq: SeqId) -> bool {
        if !matches!(self.live_slot(seq), Some(s) if !s.sealed) {
            return self.contains(seq);
        }
        self.close_all_open(seq.0);
        let slot = self.slot_mut(seq.0);
        slot.sealed = true;
        slot.window = VecDeque::new();
        true
    }

    /// Gives every open leaf of `s` its current length.
    fn close_all_open(&mut self, s: u32) {
        let window = std::mem::take(&mut self.slot_mut(s).window);
        for &e in &window {
            if e & OPEN_ENTRY != 0 {
                let n = e & !OPEN_ENTRY;
                if self.node(n).len == OPEN {
                    self.close_leaf(n);
                }
            }
        }
        let slot = self.slot_mut(s);
        slot.window = window.into_iter().map(|e| e & !OPEN_ENTRY).collect();
        slot.closed_since = 0;
    }

    /// Fixes an open leaf's length at the current end of its sequence.
    fn close_leaf(&mut self, n: u32) {
        let len = self.len(n);
        self.node_mut(n).len = len;
    }

    /// Closes `n` if it is open, telling its sequence (the only one reaching it) to look.
    fn close_if_open(&mut self, n: u32) {
        if self.node(n).len == OPEN {
            self.close_leaf(n);
            let owner = self.node(n).ref_seq;
            self.slot_mut(owner).closed_since += 1;
        }
    }

    /// Appends tokens to a live, unsealed sequence. Returns false (and changes nothing) when
    /// the sequence is unknown or sealed, or the tree would overflow its 32-bit counters.
    pub fn extend(&mut self, seq: SeqId, tokens: &[u32]) -> bool {
        let ok = matches!(self.live_slot(seq), Some(s) if !s.sealed);
        let room = MAX_TREE_TOKENS.saturating_sub(self.nodes[ROOT as usize].count as usize);
        if !ok || tokens.len() > room {
            return false;
        }
        for &t in tokens {
            self.append(seq, t);
        }
        true
    }

    #[inline]
    fn node(&self, n: u32) -> &Node {
        &self.nodes[n as usize]
    }

    #[inline]
    fn node_mut(&mut self, n: u32) -> &mut Node {
        &mut self.nodes[n as usize]
    }

    #[inline]
    fn child(&self, parent: u32, token: u32) -> Option<u32> {
        self.edges.get(&edge_key(parent, token)).copied()
    }

    #[inline]
    fn slot(&self, seq: u32) -> &SeqSlot {
        self.seqs[seq as usize]
            .as_ref()
            .expect("node references a freed sequence slot")
    }

    #[inline]
    fn slot_mut(&mut self, seq: u32) -> &mut SeqSlot {
        self.seqs[seq as usize]
            .as_mut()
            .expect("node references a freed sequence slot")
    }

    /// Label length of a node (resolving open leaves).
    #[inline]
    fn len(&self, n: u32) -> u32 {
        let node = self.node(n);
        if node.len != OPEN {
            node.len
        } else {
            self.slot(node.ref_seq).tokens.len() as u32 - node.ref_idx
        }
    }

    /// The tokens of a node's label.
    #[inline]
    fn label(&self, n: u32) -> &[u32] {
        let node = self.node(n);
        let start = node.ref_idx as usize;
        let tokens = &self.slot(node.ref_seq).tokens;
        if node.len == OPEN {
            &tokens[start..]
        } else {
            &tokens[start..start + node.len as usize]
        }
    }

    fn alloc_node(&mut self, node: Node) -> u32 {
        match self.free_nodes.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() as u32 - 1
            }
        }
    }

    /// Reserves room for `tokens` more indexed tokens (at most two nodes per token), so that
    /// appends do not stall on a rehash or an arena copy.
    pub fn reserve(&mut self, tokens: usize) {
        self.nodes.reserve(2 * tokens);
        self.edges.reserve(2 * tokens);
        self.groups.reserve(tokens);
    }

    /// Points a node's label at `seq[idx..]`, keeping the slots' reference counts right.
    #[inline]
    fn set_ref(&mut self, n: u32, seq: u32, idx: u32) {
        let old = self.node(n).ref_seq;
        if old != seq {
            self.slot_mut(seq).refs += 1;
            if old != NIL {
                self.release_slot_ref(old);
            }
        }
        let node = self.node_mut(n);
        node.ref_seq = seq;
        node.ref_idx = idx;
    }

    /// Like `set_ref`, but keeps the current reference when it names a newer sequence.
    fn offer_ref(&mut self, n: u32, seq: u32, idx: u32) {
        let cur = self.node(n).ref_seq;
        if cur == NIL || cur == seq || self.slot(cur).rank < self.slot(seq).rank {
            self.set_ref(n, seq, idx);
        }
    }

    fn release_slot_ref(&mut self, seq: u32) {
        let slot = self.slot_mut(seq);
        slot.refs -= 1;
        if slot.refs == 0 && !slot.live {
            self.seqs[seq as usize] = None;
            self.free_seqs.push(seq);
        }
    }

    fn free_node(&mut self, n: u32) {
        let node = *self.node(n);
        if node.ref_seq != NIL {
            self.release_slot_ref(node.ref_seq);
        }
        if node.group != NIL {
            self.leave_group(n);
        }
        self.nodes[n as usize] = Node::new(0, 0, 0, NIL);
        self.free_nodes.push(n);
    }

    /// Appends one token: every growing suffix of `seq` (at most `max_depth`, including the
    /// new one-token suffix) is extended by `token`.
    fn append(&mut self, seq: SeqId, token: u32) {
        let s = seq.0;
        let slot = self.seqs[s as usize].as_mut().expect("checked by extend");
        let mut window = std::mem::take(&mut slot.window);
        let rescan = std::mem::take(&mut slot.closed_since) > 0;
        if rescan {
            // Some open leaves were closed by other suffixes: their entries grow normally again.
            for e in window.iter_mut() {
                if *e & OPEN_ENTRY != 0 && self.nodes[(*e & !OPEN_ENTRY) as usize].len != OPEN {
                    *e &= !OPEN_ENTRY;
                }
            }
        }
        if window.len() == self.max_depth {
            // The oldest suffix has reached the depth cap: it stops growing.
            let e = window.pop_front().expect("max_depth >= 1");
            if e & OPEN_ENTRY != 0 {
                self.close_leaf(e & !OPEN_ENTRY);
            }
        }
        let slot = self.slot_mut(s);
        slot.tokens.push(token);
        let seq_len = slot.tokens.len() as u32;
        self.live_tokens += 1;

        window.push_back(ROOT);
        self.node_mut(ROOT).count += 1;
        for entry in window.iter_mut() {
            if *entry & OPEN_ENTRY != 0 {
                continue; // open leaves grew with the push
            }
            let n = self.extend_suffix(*entry, s, seq_len, token);
            let node = self.node(n);
            *entry = if node.count == 1 && node.first_child == NIL {
                // Only this suffix reaches the leaf `n` (and it references `s`): open it.
                self.node_mut(n).len = OPEN;
                n | OPEN_ENTRY
            } else {
                n
            };
        }
        self.slot_mut(s).window = window;
    }

    /// Extends one suffix that currently ends at node `n` by `token` (the last token of `s`,
    /// whose length is now `seq_len`); returns the node where the suffix now ends.
    fn extend_suffix(&mut self, n: u32, s: u32, seq_len: u32, token: u32) -> u32 {
        // Most growing suffixes end at leaves; those need no edge lookup.
        let child = if self.node(n).first_child == NIL {
            None
        } else {
            self.child(n, token)
        };
        let Some(c) = child else {
            if n != ROOT && self.node(n).count == 1 {
                // Only this suffix reaches the (closed) leaf `n`: grow its label in place.
                let len = self.len(n) + 1;
                self.node_mut(n).len = len;
                self.set_ref(n, s, seq_len - len);
                return n;
            }
            let c = self.alloc_node(Node::new(1, token, 1, n));
            self.set_ref(c, s, seq_len - 1);
            self.edges.insert(edge_key(n, token), c);
            self.push_last_child(n, c);
            return c;
        };
        if n != ROOT && self.node(n).count == self.node(c).count + 1 {
            // Every other suffix through `n` continues into `c`; ours ends at `n`.
            return if self.len(c) == 1 {
                self.close_if_open(c);
                self.fuse_into_child(n, c, s, seq_len)
            } else {
                self.shift_edge_boundary(n, c, s, seq_len, token)
            };
        }
        if self.len(c) == 1 {
            self.close_if_open(c);
            self.increment(c);
            self.offer_ref(c, s, seq_len - 1);
            c
        } else {
            self.split_edge(n, c, s, seq_len, token)
        }
    }

    /// `n` (which only our suffix ends at) absorbs its single length-1 child `c`:
    /// `c` takes `n`'s place with the joint label.
    fn fuse_into_child(&mut self, n: u32, c: u32, s: u32, seq_len: u32) -> u32 {
        let Node {
            parent,
            token: n_token,
            ..
        } = *self.node(n);
        let n_len = self.len(n);
        let c_token = self.node(c).token;
        {
            let child = self.node_mut(c);
            child.count += 1;
            child.token = n_token;
            child.len = n_len + 1;
            child.parent = parent;
        }
        self.set_ref(c, s, seq_len - (n_len + 1));
        self.replace_in_siblings(n, c);
        self.edges.remove(&edge_key(n, c_token));
        self.edges.insert(edge_key(parent, n_token), c);
        self.free_node(n);
        c
    }

    /// `n`'s label grows by one token taken from the front of its single child `c`.
    fn shift_edge_boundary(&mut self, n: u32, c: u32, s: u32, seq_len: u32, token: u32) -> u32 {
        let len = self.len(n) + 1;
        self.node_mut(n).len = len;
        self.set_ref(n, s, seq_len - len);
        self.drop_first_token(c);
        let c_token = self.node(c).token;
        if c_token != token {
            self.edges.remove(&edge_key(n, token));
            self.edges.insert(edge_key(n, c_token), c);
        }
        n
    }

    /// Splits `c` (label length > 1) after its first token; the new middle node is where our
    /// suffix now ends.
    fn split_edge(&mut self, n: u32, c: u32, s: u32, seq_len: u32, token: u32) -> u32 {
        let (c_count, c_ref_seq, c_ref_idx) = {
            let child = self.node(c);
            (child.count, child.ref_seq, child.ref_idx)
        };
        let m = self.alloc_node(Node::new(c_count, token, 1, n));
        if self.slot(c_ref_seq).rank > self.slot(s).rank {
            self.set_ref(m, c_ref_seq, c_ref_idx);
        } else {
            self.set_ref(m, s, seq_len - 1);
        }
        self.replace_in_siblings(c, m);
        self.edges.insert(edge_key(n, token), m);
        self.drop_first_token(c);
        let c_token = self.node(c).token;
        self.node_mut(c).parent = m;
        self.edges.insert(edge_key(m, c_token), c);
        self.make_only_child(m, c);
        self.increment(m);
        m
    }

    fn drop_first_token(&mut self, c: u32) {
        let node = self.node_mut(c);
        if node.len != OPEN {
            node.len -= 1;
        }
        node.ref_idx += 1;
        let first = self.label(c)[0];
        self.node_mut(c).token = first;
    }

    /// Removes a sequence; the counts and shape become exactly those of a tree that never
    /// held it. Returns false for an unknown sequence.
    pub fn remove(&mut self, seq: SeqId) -> bool {
        if !self.contains(seq) {
            return false;
        }
        let s = seq.0;
        self.close_all_open(s);
        let tokens = std::mem::take(&mut self.slot_mut(s).tokens);
        for start in 0..tokens.len() {
            self.remove_suffix(&tokens[start..]);
        }
        let slot = self.slot_mut(s);
        slot.tokens = tokens;
        slot.live = false;
        slot.window = VecDeque::new();
        let (len, refs) = (slot.tokens.len(), slot.refs);
        self.live_tokens -= len;
        self.live_seqs -= 1;
        if refs == 0 {
            self.seqs[s as usize] = None;
            self.free_seqs.push(s);
        }
        true
    }

    /// Takes one suffix (the tail `suffix`, truncated by the depth cap) out of the counts.
    fn remove_suffix(&mut self, suffix: &[u32]) {
        let mut node = ROOT;
        self.node_mut(ROOT).count -= 1;
        let mut idx = 0;
        while idx < suffix.len() {
            let Some(c) = self.child(node, suffix[idx]) else {
                break;
            };
            if self.node(c).count > 1 {
                self.decrement(c);
            } else {
                self.remove_subtree(node, c);
                break;
            }
            idx += self.len(c) as usize;
            node = c;
        }
        // The suffix ended at `node`; if it was the only difference between `node` and its
        // single child, the two merge back into one edge.
        let only = self.node(node).first_child;
        if node != ROOT
            && only != NIL
            && only == self.node(node).last_child
            && self.node(only).count == self.node(node).count
        {
            self.merge_into_child(node, only);
        }
    }

    fn merge_into_child(&mut self, n: u32, c: u32) {
        let Node {
            parent,
            token: n_token,
            ..
        } = *self.node(n);
        let n_len = self.len(n);
        let c_token = self.node(c).token;
        {
            let child = self.node_mut(c);
            child.token = n_token;
            if child.len != OPEN {
                child.len += n_len;
            }
            child.ref_idx -= n_len;
            child.parent = parent;
        }
        self.replace_in_siblings(n, c);
        self.edges.remove(&edge_key(n, c_token));
        self.edges.insert(edge_key(parent, n_token), c);
        self.free_node(n);
    }

    fn remove_subtree(&mut self, parent: u32, c: u32) {
        self.remove_from_siblings(c);
        self.edges.remove(&edge_key(parent, self.node(c).token));
        let mut stack = vec![c];
        while let Some(x) = stack.pop() {
            let mut ch = self.node(x).first_child;
            while ch != NIL {
                self.edges.remove(&edge_key(x, self.node(ch).token));
                stack.push(ch);
                ch = self.node(ch).next_sib;
            }
            self.free_node(x);
        }
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        *self = Self::new(self.max_depth);
    }

    /// Bytes held by the tree: node and group arenas, the edge map and stored sequences
    /// (including storage of removed sequences that nodes still reference).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let edge_entry = size_of::<u64>() + size_of::<u32>() + 1; // key, value, control byte
        let mut total = size_of::<Self>()
            + self.nodes.capacity() * size_of::<Node>()
            + self.free_nodes.capacity() * 4
            + self.groups.capacity() * size_of::<Group>()
            + self.free_groups.capacity() * 4
            + self.edges.capacity() * edge_entry
            + self.seqs.capacity() * size_of::<Option<SeqSlot>>()
            + self.free_seqs.capacity() * 4;
        for slot in self.seqs.iter().flatten() {
            total += slot.tokens.capacity() * 4 + slot.window.capacity() * 4;
        }
        total
    }
}
