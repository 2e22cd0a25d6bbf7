//! How a global point set is spread over ranks in the distributed tests: rank r holds
//! `order[offsets[r]..offsets[r + 1]]` (indices into the global set), in that order. The
//! single-rank reference runs on the points concatenated in that order.

use super::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Every point to a random rank.
    Random,
    /// Everything on the last rank.
    AllOnLast,
    /// Sorted along x, far-apart slabs, the last rank getting the lowest slab.
    SlabsReversed,
    /// Only odd ranks hold points (rank 0 and other even ranks are empty).
    EvenRanksEmpty,
    /// Rank 0 holds many copies of one point, the rest random.
    IdenticalOnFirst,
}

pub const SPREADS: [Spread; 5] = [Spread::Random, Spread::AllOnLast, Spread::SlabsReversed, Spread::EvenRanksEmpty, Spread::IdenticalOnFirst];

pub struct Layout {
    pub order: Vec<usize>,
    pub offsets: Vec<usize>,
}

impl Layout {
    pub fn mine(&self, r: usize) -> &[usize] {
        &self.order[self.offsets[r]..self.offsets[r + 1]]
    }
}

/// The layout of `xs` (first coordinates) over `p` ranks.
pub fn layout(spread: Spread, xs: &[f64], p: usize, rng: &mut Rng) -> Layout {
    let n = xs.len();
    let mut per: Vec<Vec<usize>> = vec![Vec::new(); p];
    match spread {
        Spread::Random | Spread::IdenticalOnFirst => (0..n).for_each(|i| per[rng.below(p)].push(i)),
        Spread::AllOnLast => per[p - 1] = (0..n).collect(),
        Spread::SlabsReversed => {
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]).then(a.cmp(&b)));
            for (j, chunk) in idx.chunks(n.div_ceil(p).max(1)).enumerate() {
                per[p - 1 - j] = chunk.to_vec();
            }
        }
        Spread::EvenRanksEmpty => {
            let odd: Vec<usize> = (0..p).filter(|r| r % 2 == 1).collect();
            let holders = if odd.is_empty() { vec![0] } else { odd };
            (0..n).for_each(|i| per[holders[rng.below(holders.len())]].push(i));
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut offsets = vec![0];
    for v in per {
        order.extend(v);
        offsets.push(order.len());
    }
    Layout { order, offsets }
}

/// For `IdenticalOnFirst`: overwrite the points of rank 0 with copies of its first point.
pub fn make_identical<T: Copy>(pts: &mut [T], lay: &Layout) {
    let mine = lay.mine(0);
    if let Some(&first) = mine.first() {
        let v = pts[first];
        for &i in mine {
            pts[i] = v;
        }
    }
}
