//! Sibling order: children of a node form a doubly linked list sorted by decreasing count;
//! consecutive siblings with equal counts share a `Group` whose `head` is the first of the
//! run, so a count change moves a node in O(1). Ties are ordered exactly as in
//! ArcticInference 0.3.0 (new children join at the tail; an incremented node moves to the
//! run boundary the same way), which makes our drafts equal to its drafts, ties included.

use super::{Group, SuffixTree, NIL};

impl SuffixTree {
    fn new_group(&mut self, head: u32) -> u32 {
        let g = Group {
            head,
            next: NIL,
            prev: NIL,
            members: 1,
        };
        let id = match self.free_groups.pop() {
            Some(i) => {
                self.groups[i as usize] = g;
                i
            }
            None => {
                self.groups.push(g);
                self.groups.len() as u32 - 1
            }
        };
        self.node_mut(head).group = id;
        id
    }

    #[inline]
    fn group(&self, g: u32) -> &Group {
        &self.groups[g as usize]
    }

    #[inline]
    fn group_mut(&mut self, g: u32) -> &mut Group {
        &mut self.groups[g as usize]
    }

    /// Drops `n`'s membership of its group, freeing the group when it was the last member.
    pub(super) fn leave_group(&mut self, n: u32) {
        let g = self.node(n).group;
        self.node_mut(n).group = NIL;
        let group = self.group_mut(g);
        group.members -= 1;
        if group.members == 0 {
            self.free_groups.push(g);
        }
    }

    fn join_group(&mut self, n: u32, g: u32) {
        let old = self.node(n).group;
        if old == g {
            return;
        }
        if old != NIL {
            self.leave_group(n);
        }
        self.group_mut(g).members += 1;
        self.node_mut(n).group = g;
    }

    /// Unlinks group `g` from its neighbours in the group list.
    fn unlink_group(&mut self, g: u32) {
        let Group { next, prev, .. } = *self.group(g);
        if prev != NIL {
            self.group_mut(prev).next = next;
        }
        if next != NIL {
            self.group_mut(next).prev = prev;
        }
        let group = self.group_mut(g);
        group.next = NIL;
        group.prev = NIL;
    }

    /// Makes `c` the only child of `m` (with a fresh group).
    pub(super) fn make_only_child(&mut self, m: u32, c: u32) {
        {
            let node = self.node_mut(m);
            node.first_child = c;
            node.last_child = c;
        }
        let child = self.node_mut(c);
        child.prev_sib = NIL;
        child.next_sib = NIL;
        let had_group = child.group != NIL;
        if had_group {
            self.leave_group(c);
        }
        self.new_group(c);
    }

    /// Adds a brand-new child (count 1, so it belongs at the tail).
    pub(super) fn push_last_child(&mut self, parent: u32, c: u32) {
        let last = self.node(parent).last_child;
        if last == NIL {
            self.make_only_child(parent, c);
        } else {
            self.insert_after(c, last);
        }
    }

    /// Takes `n` out of its parent's child list. When `n` was alone in its group it keeps the
    /// (now unlinked) group, to be reused if it is inserted again.
    pub(super) fn remove_from_siblings(&mut self, n: u32) {
        let node = *self.node(n);
        let g = node.group;
        if self.group(g).head == n {
            if node.next_sib != NIL && self.node(node.next_sib).count == node.count {
                self.group_mut(g).head = node.next_sib;
                self.leave_group(n);
            } else {
                self.unlink_group(g);
            }
        } else {
            self.leave_group(n);
        }
        if node.next_sib != NIL {
            self.node_mut(node.next_sib).prev_sib = node.prev_sib;
        } else {
            self.node_mut(node.parent).last_child = node.prev_sib;
        }
        if node.prev_sib != NIL {
            self.node_mut(node.prev_sib).next_sib = node.next_sib;
        } else {
            self.node_mut(node.parent).first_child = node.next_sib;
        }
        let node = self.node_mut(n);
        node.prev_sib = NIL;
        node.next_sib = NIL;
    }

    /// Gives `n` a group of its own (reusing its unlinked group if it has one).
    fn own_group(&mut self, n: u32) -> u32 {
        match self.node(n).group {
            NIL => self.new_group(n),
            g => g,
        }
    }

    fn insert_before(&mut self, n: u32, other: u32) {
        let prev = self.node(other).prev_sib;
        let parent = self.node(n).parent;
        if prev != NIL {
            self.node_mut(prev).next_sib = n;
        } else {
            self.node_mut(parent).first_child = n;
        }
        {
            let node = self.node_mut(n);
            node.next_sib = other;
            node.prev_sib = prev;
        }
        self.node_mut(other).prev_sib = n;

        let count = self.node(n).count;
        if prev != NIL && self.node(prev).count == count {
            let g = self.node(prev).group;
            self.join_group(n, g);
        } else if self.node(other).count == count {
            let g = self.node(other).group;
            self.join_group(n, g);
            self.group_mut(g).head = n;
        } else {
            let g = self.own_group(n);
            if prev != NIL {
                let pg = self.node(prev).group;
                self.group_mut(g).prev = pg;
                self.group_mut(pg).next = g;
            }
            let og = self.node(other).group;
            self.group_mut(g).next = og;
            self.group_mut(og).prev = g;
        }
    }

    fn insert_after(&mut self, n: u32, other: u32) {
        let next = self.node(other).next_sib;
        let parent = self.node(n).parent;
        if next != NIL {
            self.node_mut(next).prev_sib = n;
        } else {
            self.node_mut(parent).last_child = n;
        }
        {
            let node = self.node_mut(n);
            node.prev_sib = other;
            node.next_sib = next;
        }
        self.node_mut(other).next_sib = n;

        let count = self.node(n).count;
        if next != NIL && self.node(next).count == count {
            let g = self.node(next).group;
            self.join_group(n, g);
            if self.group(g).head == next {
                self.group_mut(g).head = n;
            }
        } else if self.node(other).count == count {
            let g = self.node(other).group;
            self.join_group(n, g);
        } else {
            let g = self.own_group(n);
            if next != NIL {
                let ng = self.node(next).group;
                self.group_mut(g).next = ng;
                self.group_mut(ng).prev = g;
            }
            let og = self.node(other).group;
            self.group_mut(g).prev = og;
            self.group_mut(og).next = g;
        }
    }

    /// Puts `new` where `old` is in the child list; both must have the same count.
    pub(super) fn replace_in_siblings(&mut self, old: u32, new: u32) {
        let o = *self.node(old);
        if o.next_sib != NIL {
            self.node_mut(o.next_sib).prev_sib = new;
        } else {
            self.node_mut(o.parent).last_child = new;
        }
        if o.prev_sib != NIL {
            self.node_mut(o.prev_sib).next_sib = new;
        } else {
            self.node_mut(o.parent).first_child = new;
        }
        {
            let node = self.node_mut(new);
            node.prev_sib = o.prev_sib;
            node.next_sib = o.next_sib;
        }
        {
            let node = self.node_mut(old);
            node.prev_sib = NIL;
            node.next_sib = NIL;
        }
        let g = o.group;
        if self.group(g).head == old {
            self.group_mut(g).head = new;
        }
        self.join_group(new, g);
        self.leave_group(old);
    }

    /// Adds one to `n`'s count, keeping its siblings sorted.
    pub(super) fn increment(&mut self, n: u32) {
        let node = *self.node(n);
        if node.parent == NIL {
            self.node_mut(n).count += 1;
            return;
        }
        let c = node.count;
        let prev_count = (node.prev_sib != NIL).then(|| self.node(node.prev_sib).count);
        if prev_count.is_none_or(|p| p > c + 1) {
            // Stays in place; it leaves its run if a sibling after it shares the old count.
            if node.next_sib != NIL && self.node(node.next_sib).count == c {
                let orig = node.group;
                self.group_mut(orig).head = node.next_sib;
                let orig_prev = self.group(orig).prev;
                self.leave_group(n);
                let g = self.new_group(n);
                self.group_mut(g).next = orig;
                if orig_prev != NIL {
                    self.group_mut(g).prev = orig_prev;
                    self.group_mut(orig_prev).next = g;
                }
                self.group_mut(orig).prev = g;
            }
            self.node_mut(n).count += 1;
        } else {
            let target = self.group(self.node(node.prev_sib).group).head;
            self.remove_from_siblings(n);
            self.node_mut(n).count += 1;
            self.insert_before(n, target);
        }
    }

    /// Subtracts one from `n`'s count (which must be > 1 for non-root nodes), keeping its
    /// siblings sorted.
    pub(super) fn decrement(&mut self, n: u32) {
        let node = *self.node(n);
        if node.parent == NIL {
            self.node_mut(n).count -= 1;
            return;
        }
        let c = node.count;
        let next_count = (node.next_sib != NIL).then(|| self.node(node.next_sib).count);
        match next_count {
            None => self.decrement_in_place(n),
            Some(nc) if nc < c - 1 => self.decrement_in_place(n),
            Some(nc) if nc == c - 1 => {
                // Joins the next run as its head without moving.
                let ng = self.node(node.next_sib).group;
                self.group_mut(ng).head = n;
                let g = node.group;
                if self.group(g).head == n {
                    self.unlink_group(g);
                }
                self.join_group(n, ng);
                self.node_mut(n).count -= 1;
            }
            Some(_) => {
                // Moves past the rest of its run, to the head of the next run.
                let next_group = self.group(node.group).next;
                self.remove_from_siblings(n);
                self.node_mut(n).count -= 1;
                if next_group == NIL {
                    let last = self.node(node.parent).last_child;
                    self.insert_after(n, last);
                } else {
                    let head = self.group(next_group).head;
                    self.insert_before(n, head);
                }
            }
        }
    }

    fn decrement_in_place(&mut self, n: u32) {
        let node = *self.node(n);
        let c = node.count;
        if node.prev_sib != NIL && self.node(node.prev_sib).count == c {
            // Splits off the end of its run into a run of its own.
            let orig = node.group;
            let orig_next = self.group(orig).next;
            self.leave_group(n);
            let g = self.new_group(n);
            self.group_mut(g).prev = orig;
            if orig_next != NIL {
                self.group_mut(g).next = orig_next;
                self.group_mut(orig_next).prev = g;
            }
            self.group_mut(orig).next = g;
        }
        self.node_mut(n).count -= 1;
    }
}
