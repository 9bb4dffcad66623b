//! Keeping the `k` best of a stream of scored items.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// The `capacity` highest-scoring items pushed so far. Equal scores are broken by the
/// smaller item winning, so results never depend on scan order.
#[derive(Debug)]
pub struct TopK<T> {
    capacity: usize,
    /// A min-heap (through `Reverse`): the root is the worst item kept, the one a
    /// better item evicts.
    heap: BinaryHeap<Reverse<Scored<T>>>,
}

#[derive(Debug, Clone, Copy)]
struct Scored<T> {
    score: f32,
    item: T,
}

impl<T: Ord> Ord for Scored<T> {
    /// Better is greater: a higher score, or the same score and a smaller item.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.item.cmp(&self.item))
    }
}

impl<T: Ord> PartialOrd for Scored<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Ord> PartialEq for Scored<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T: Ord> Eq for Scored<T> {}

impl<T: Ord + Copy> TopK<T> {
    pub fn new(capacity: usize) -> TopK<T> {
        TopK { capacity, heap: BinaryHeap::with_capacity(capacity.saturating_add(1).min(1 << 16)) }
    }

    pub fn is_full(&self) -> bool {
        self.heap.len() >= self.capacity
    }

    /// Offers an item; returns the one that fell out, if any (possibly the item itself).
    pub fn push(&mut self, score: f32, item: T) -> Option<(f32, T)> {
        if self.capacity == 0 {
            return Some((score, item));
        }
        let offered = Scored { score, item };
        if !self.is_full() {
            self.heap.push(Reverse(offered));
            return None;
        }
        let mut worst = self.heap.peek_mut().expect("a full heap has a root");
        if offered > worst.0 {
            let evicted = std::mem::replace(&mut worst.0, offered);
            Some((evicted.score, evicted.item))
        } else {
            Some((score, item))
        }
    }

    /// The lowest score kept, once full.
    pub fn worst_score(&self) -> Option<f32> {
        self.heap.peek().filter(|_| self.is_full()).map(|Reverse(worst)| worst.score)
    }

    /// Everything kept, best first.
    pub fn into_sorted(self) -> Vec<(T, f32)> {
        // `into_sorted_vec` sorts ascending by `Reverse`, which is best first.
        self.heap.into_sorted_vec().into_iter().map(|Reverse(s)| (s.item, s.score)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_best_and_reports_evictions() {
        let mut top = TopK::new(3);
        for (item, score) in [(1u32, 0.5), (2, 0.9), (3, 0.1), (4, 0.7)] {
            top.push(score, item);
        }
        assert!(top.is_full());
        assert_eq!(top.worst_score(), Some(0.5));
        assert_eq!(top.push(0.6, 5), Some((0.5, 1)));
        assert_eq!(top.push(0.0, 6), Some((0.0, 6)));
        assert_eq!(top.into_sorted(), vec![(2, 0.9), (4, 0.7), (5, 0.6)]);
    }

    #[test]
    fn ties_prefer_the_smaller_item_and_zero_capacity_keeps_nothing() {
        let mut top = TopK::new(2);
        for item in [9u32, 3, 7] {
            top.push(1.0, item);
        }
        assert_eq!(top.into_sorted(), vec![(3, 1.0), (7, 1.0)]);
        let mut none = TopK::new(0);
        assert_eq!(none.push(1.0, 1u32), Some((1.0, 1)));
        assert!(none.into_sorted().is_empty());
    }
}
