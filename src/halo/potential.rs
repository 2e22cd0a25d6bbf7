//! The potential minimum and the most bound particle of one halo, exact: the same particle
//! as a brute-force sum, found with a tree that bounds every member's potential.
//!
//! Definition (HACC's): the potential of member i among the halo's members only,
//! `φ_i = -G Σ_{j ≠ i} m_j / sqrt(r_ij² + ε²)` (Plummer softening ε), positions unwrapped
//! about the first member by the periodic minimum image, the sum in f64 over j ascending
//! (member order: ascending input index). The most bound particle minimises
//! `E_i = φ_i + |v_i - v̄|² / 2`, v̄ the halo's mass-weighted mean velocity. Ties go to
//! the earlier member.
//!
//! How: a kd-tree over the members (leaves of at most `LEAF` points, each node's box,
//! mass, centre of mass and `Q = Σ m |y - com|²`). A source node B seen from a point x
//! contributes to `Σ m / sqrt(r² + ε²)` between `M_B / sqrt(d_max² + ε²)` and
//! `M_B / sqrt(d_min² + ε²)` whatever its points' layout, and within
//! `Q / (d_min² + ε²)^(3/2)` of its monopole `M_B / sqrt(|x - com|² + ε²)` (Taylor's
//! remainder: the dipole term vanishes about the centre of mass, and the kernel's Hessian
//! norm is at most `2 / (r² + ε²)^(3/2)`): rigorous intervals, intersected. A walk accepts a node's interval
//! when it is narrower than `θ` times its upper end (and sums a leaf exactly otherwise),
//! so every member gets bounds [lo_i, hi_i] of its value. Members whose lower bound is above
//! the smallest upper bound cannot be the minimum; the others' bounds are tightened with a
//! smaller θ until few are left, and those few are summed exactly as the definition says.

use rayon::prelude::*;

/// G and the Plummer softening, in the caller's units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gravity {
    /// The gravitational constant.
    pub g: f64,
    /// Plummer softening length ε (>= 0).
    pub softening: f64,
}

/// Points per kd-tree leaf.
const LEAF: usize = 16;
/// Halos up to this many members are summed directly (every member exactly).
pub(crate) const DIRECT_MAX: usize = 512;
/// Candidates left when the bounds stop being tightened.
const FEW: usize = 32;
/// Relative slack on the bounds for rounding (sums of up to ~1e7 terms in f64).
const SLACK: f64 = 1e-8;

/// One halo's members: positions unwrapped about the first member, masses, and the
/// quantity added to the potential (0, or the specific kinetic energy for the MBP).
pub(crate) struct Members<'a, const D: usize> {
    pub pos: &'a [[f64; D]],
    pub mass: &'a [f64],
}

struct Node<const D: usize> {
    lo: [f64; D],
    hi: [f64; D],
    mass: f64,
    /// Centre of mass (the monopole).
    com: [f64; D],
    /// `Σ m |y - com|²` over the node's points: bounds the monopole's error.
    quad: f64,
    /// Points `first .. first + count` of the tree's order.
    first: u32,
    count: u32,
    /// Children (0: a leaf; the root is node 0, never a child).
    left: u32,
    right: u32,
}

/// A kd-tree over the members.
struct KdTree<const D: usize> {
    nodes: Vec<Node<D>>,
    /// Member index of each tree slot, and the slot of each member.
    order: Vec<u32>,
    slot: Vec<u32>,
}

impl<const D: usize> KdTree<D> {
    fn new(m: &Members<'_, D>) -> Self {
        let n = m.pos.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        let mut nodes = Vec::with_capacity(2 * n / LEAF + 2);
        build(m, &mut order, 0, &mut nodes);
        let mut slot = vec![0u32; n];
        for (s, &i) in order.iter().enumerate() {
            slot[i as usize] = s as u32;
        }
        Self { nodes, order, slot }
    }
}

/// Appends the node of `order[..]` (slots from `first`) and its subtree; returns its index.
fn build<const D: usize>(m: &Members<'_, D>, order: &mut [u32], first: usize, nodes: &mut Vec<Node<D>>) -> u32 {
    let (mut lo, mut hi) = ([f64::INFINITY; D], [f64::NEG_INFINITY; D]);
    let (mut mass, mut mx) = (0.0, [0.0; D]);
    for &i in order.iter() {
        let p = m.pos[i as usize];
        let w = m.mass[i as usize];
        for d in 0..D {
            lo[d] = lo[d].min(p[d]);
            hi[d] = hi[d].max(p[d]);
            mx[d] += w * p[d];
        }
        mass += w;
    }
    // Massless nodes: the box centre (they add nothing).
    let com = std::array::from_fn(|d| if mass > 0.0 { (mx[d] / mass).clamp(lo[d], hi[d]) } else { 0.5 * (lo[d] + hi[d]) });
    let quad = order.iter().map(|&i| m.mass[i as usize] * dist2(&m.pos[i as usize], &com)).sum();
    let at = nodes.len() as u32;
    nodes.push(Node { lo, hi, mass, com, quad, first: first as u32, count: order.len() as u32, left: 0, right: 0 });
    if order.len() > LEAF {
        let axis = (0..D).max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b]))).unwrap_or(0);
        let half = order.len() / 2;
        order.select_nth_unstable_by(half, |&a, &b| m.pos[a as usize][axis].total_cmp(&m.pos[b as usize][axis]).then(a.cmp(&b)));
        let (l, r) = order.split_at_mut(half);
        let left = build(m, l, first, nodes);
        let right = build(m, r, first + half, nodes);
        nodes[at as usize].left = left;
        nodes[at as usize].right = right;
    }
    at
}

#[inline(always)]
fn dist2<const D: usize>(a: &[f64; D], b: &[f64; D]) -> f64 {
    let mut s = 0.0;
    for d in 0..D {
        let x = a[d] - b[d];
        s += x * x;
    }
    s
}

/// The definition: `Σ_{j ≠ i} m_j / sqrt(r_ij² + ε²)` over j ascending (times -G: φ_i).
pub(crate) fn direct_sum<const D: usize>(m: &Members<'_, D>, eps2: f64, i: usize) -> f64 {
    let x = m.pos[i];
    let mut s = 0.0;
    for (j, p) in m.pos.iter().enumerate() {
        if j != i {
            s += m.mass[j] / (dist2(&x, p) + eps2).sqrt();
        }
    }
    s
}

impl<const D: usize> KdTree<D> {
    /// Bounds [lo, hi] of `Σ_{j ≠ i} m_j / sqrt(r_ij² + ε²)`, nodes accepted when their
    /// interval is at most `theta` times its upper end; and the work it took (nodes seen
    /// plus points summed).
    fn bounds(&self, m: &Members<'_, D>, eps2: f64, i: usize, theta: f64, stack: &mut Vec<u32>) -> (f64, f64, usize) {
        let x = m.pos[i];
        let me = self.slot[i];
        let (mut lo, mut hi, mut work) = (0.0f64, 0.0f64, 0usize);
        stack.clear();
        stack.push(0);
        while let Some(k) = stack.pop() {
            let nd = &self.nodes[k as usize];
            work += 1;
            let inside = (nd.first..nd.first + nd.count).contains(&me);
            if !inside {
                let (mut dmin2, mut dmax2) = (0.0, 0.0);
                for d in 0..D {
                    let g = (nd.lo[d] - x[d]).max(x[d] - nd.hi[d]).max(0.0);
                    let u = (x[d] - nd.lo[d]).abs().max((nd.hi[d] - x[d]).abs());
                    dmin2 += g * g;
                    dmax2 += u * u;
                }
                // Two intervals of the node's sum, intersected: the plain one (every point
                // between the box's nearest and farthest distance), and the monopole at the
                // centre of mass with the bound of its second-order remainder (the dipole
                // vanishes about the centre of mass; the kernel's Hessian is at most
                // 2 / (r² + ε²)^(3/2) in norm, r >= the box's nearest distance).
                let (a, b) = (1.0 / (dmin2 + eps2).sqrt(), 1.0 / (dmax2 + eps2).sqrt());
                let v = nd.mass / (dist2(&x, &nd.com) + eps2).sqrt();
                let e = nd.quad * a * a * a;
                let (l, h) = ((v - e).max(nd.mass * b), (v + e).min(nd.mass * a));
                if h - l <= theta * h {
                    lo += l;
                    hi += h;
                    continue;
                }
            }
            if nd.left == 0 {
                let mut s = 0.0;
                for &j in &self.order[nd.first as usize..(nd.first + nd.count) as usize] {
                    if j as usize != i {
                        s += m.mass[j as usize] / (dist2(&x, &m.pos[j as usize]) + eps2).sqrt();
                    }
                }
                lo += s;
                hi += s;
                work += nd.count as usize;
            } else {
                stack.push(nd.left);
                stack.push(nd.right);
            }
        }
        (lo * (1.0 - SLACK), hi * (1.0 + SLACK), work)
    }
}

/// Halos up to this many members get their potential energy by direct summation.
pub(crate) const ENERGY_DIRECT_MAX: usize = 2048;
/// Opening angle of the energy walk: a node is taken whole at its centre of mass when its
/// largest side is below this fraction of the distance to its box.
const ENERGY_THETA: f64 = 0.3;

impl<const D: usize> KdTree<D> {
    /// `Σ_{j ≠ i} m_j / sqrt(r_ij² + ε²)` by the monopole walk (Barnes–Hut).
    fn monopole_sum(&self, m: &Members<'_, D>, eps2: f64, i: usize, stack: &mut Vec<u32>) -> f64 {
        let x = m.pos[i];
        let me = self.slot[i];
        let mut s = 0.0;
        stack.clear();
        stack.push(0);
        while let Some(k) = stack.pop() {
            let nd = &self.nodes[k as usize];
            if !(nd.first..nd.first + nd.count).contains(&me) {
                // Opened unless the node's box is small against the distance to the box
                // itself (not to its centre of mass, which may sit in a far corner).
                let (mut gap2, mut size) = (0.0, 0.0f64);
                for d in 0..D {
                    let g = (nd.lo[d] - x[d]).max(x[d] - nd.hi[d]).max(0.0);
                    gap2 += g * g;
                    size = size.max(nd.hi[d] - nd.lo[d]);
                }
                if size * size < ENERGY_THETA * ENERGY_THETA * gap2 {
                    s += nd.mass / (dist2(&x, &nd.com) + eps2).sqrt();
                    continue;
                }
            }
            if nd.left == 0 {
                for &j in &self.order[nd.first as usize..(nd.first + nd.count) as usize] {
                    if j as usize != i {
                        s += m.mass[j as usize] / (dist2(&x, &m.pos[j as usize]) + eps2).sqrt();
                    }
                }
            } else {
                stack.push(nd.left);
                stack.push(nd.right);
            }
        }
        s
    }
}

/// The members' potential energy `W = ½ Σ_i m_i φ_i` (φ as in the module's definition):
/// direct sums up to `ENERGY_DIRECT_MAX` members, above a monopole tree walk with opening
/// angle 0.3 against the distance to each node's box (relative error below 1e-3 on
/// halo-like sets, below 1e-2 with thousands of members on one line; tested). `g > 0`.
pub(crate) fn potential_energy<const D: usize>(m: &Members<'_, D>, grav: Gravity) -> f64 {
    let n = m.pos.len();
    let eps2 = grav.softening * grav.softening;
    let sums: Vec<f64> = if n <= ENERGY_DIRECT_MAX {
        (0..n).map(|i| direct_sum(m, eps2, i)).collect()
    } else {
        let tree = KdTree::new(m);
        (0..n).into_par_iter().map_init(Vec::new, |stack, i| tree.monopole_sum(m, eps2, i, stack)).collect()
    };
    -0.5 * grav.g * sums.iter().zip(m.mass).map(|(s, w)| s * w).sum::<f64>()
}

/// The member minimising `-G S_i + extra(i)` (S_i = `direct_sum`), with its value; ties
/// to the earlier member. `g > 0`.
pub(crate) fn minimum<const D: usize>(m: &Members<'_, D>, grav: Gravity, extra: impl Fn(usize) -> f64 + Sync) -> (usize, f64) {
    let n = m.pos.len();
    let eps2 = grav.softening * grav.softening;
    let value = |i: usize| -grav.g * direct_sum(m, eps2, i) + extra(i);
    let pick = |cands: &[usize]| -> (usize, f64) {
        let vals: Vec<f64> =
            if cands.len() * n > 1 << 16 { cands.par_iter().map(|&i| value(i)).collect() } else { cands.iter().map(|&i| value(i)).collect() };
        let mut best = (cands[0], vals[0]);
        for (&i, &v) in cands.iter().zip(&vals).skip(1) {
            if v < best.1 || (v == best.1 && i < best.0) {
                best = (i, v);
            }
        }
        best
    };
    if n <= DIRECT_MAX {
        return pick(&(0..n).collect::<Vec<_>>());
    }
    let tree = KdTree::new(m);
    let mut cands: Vec<usize> = (0..n).collect();
    let mut theta = 0.25;
    while cands.len() > FEW && theta > 1e-6 {
        // Bounds of each candidate's value: -G S is in [-G hi, -G lo].
        let b: Vec<(f64, f64, usize)> = cands
            .par_iter()
            .map_init(Vec::new, |stack, &i| {
                let (lo, hi, work) = tree.bounds(m, eps2, i, theta, stack);
                let e = extra(i);
                (-grav.g * hi + e, -grav.g * lo + e, work)
            })
            .collect();
        let upper = b.iter().map(|v| v.1).fold(f64::INFINITY, f64::min);
        // Rounding of the additions above: an ulp of the larger terms (coincident members
        // without softening: -inf, kept as it is).
        let upper = if upper.is_finite() { upper + upper.abs() * SLACK } else { upper };
        let work = b.iter().map(|v| v.2).sum::<usize>() as f64 / b.len() as f64;
        cands = cands.iter().zip(&b).filter(|(_, v)| v.0 <= upper).map(|(&i, _)| i).collect();
        // A round with θ/4 costs several times this one's work per candidate: once that
        // nears a direct sum (n), the direct sums of the candidates left are cheaper.
        if 8.0 * work >= n as f64 {
            break;
        }
        theta *= 0.25;
    }
    pick(&cands)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lcg(u64);
    impl Lcg {
        fn unit(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u, v) = (self.unit().max(1e-300), self.unit());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// The brute-force oracle: every member's value, then the first smallest.
    fn brute<const D: usize>(pos: &[[f64; D]], mass: &[f64], g: Gravity, extra: &[f64]) -> (usize, f64) {
        let eps2 = g.softening * g.softening;
        let mut best = (0, f64::INFINITY);
        for i in 0..pos.len() {
            let mut s = 0.0f64;
            for j in 0..pos.len() {
                if j == i {
                    continue;
                }
                let r2: f64 = (0..D).map(|d| (pos[i][d] - pos[j][d]) * (pos[i][d] - pos[j][d])).sum();
                s += mass[j] / (r2 + eps2).sqrt();
            }
            let v = -g.g * s + extra[i];
            if v < best.1 || i == 0 {
                best = (i, v);
            }
        }
        best
    }

    /// NFW-like clumps with substructure, duplicates and a far satellite; f64.
    fn halo<const D: usize>(n: usize, seed: u64) -> (Vec<[f64; D]>, Vec<f64>, Vec<f64>) {
        let mut r = Lcg(seed);
        let sub: [f64; D] = std::array::from_fn(|_| 0.3 + 0.1 * r.unit());
        let pos: Vec<[f64; D]> = (0..n)
            .map(|i| match i % 10 {
                0 => std::array::from_fn(|d| sub[d] + 0.01 * r.normal()),
                1 if i > 20 => [0.0; D].map(|_| 0.123), // duplicates
                2 if i % 1000 == 2 => [2.0; D],
                _ => {
                    let s = 0.1 * r.unit().powi(2);
                    std::array::from_fn(|_| s * r.normal())
                }
            })
            .collect();
        let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64 * 0.5).collect();
        let kin: Vec<f64> = (0..n).map(|_| 50.0 * r.unit()).collect();
        (pos, mass, kin)
    }

    #[test]
    fn minimum_is_the_brute_force_particle() {
        for (n, soft) in [(40, 0.01), (500, 0.0), (3000, 0.005), (20_000, 0.002)] {
            let (pos, mass, kin) = halo::<3>(n, n as u64);
            // No softening with duplicates gives -inf: move them apart then.
            let pos: Vec<[f64; 3]> = if soft == 0.0 { pos.iter().enumerate().map(|(i, p)| p.map(|c| c + 1e-9 * i as f64)).collect() } else { pos };
            let g = Gravity { g: 43.0, softening: soft };
            let m = Members { pos: &pos, mass: &mass };
            let zeros = vec![0.0; n];
            assert_eq!(minimum(&m, g, |_| 0.0), brute(&pos, &mass, g, &zeros), "potential minimum, n = {n}");
            assert_eq!(minimum(&m, g, |i| kin[i]), brute(&pos, &mass, g, &kin), "most bound, n = {n}");
        }
        // 2D, and a flat core where many members are near the minimum.
        let (pos, mass, _) = halo::<2>(5000, 7);
        let g = Gravity { g: 1.0, softening: 0.05 };
        assert_eq!(minimum(&Members { pos: &pos, mass: &mass }, g, |_| 0.0), brute(&pos, &mass, g, &vec![0.0; 5000]));
        let flat: Vec<[f64; 3]> = (0..4000).map(|i| [(i % 20) as f64, ((i / 20) % 20) as f64, (i / 400) as f64]).collect();
        let ones = vec![1.0; 4000];
        let g = Gravity { g: 1.0, softening: 0.5 };
        assert_eq!(minimum(&Members { pos: &flat, mass: &ones }, g, |_| 0.0), brute(&flat, &ones, g, &vec![0.0; 4000]), "a lattice: ties");
    }

    /// The potential energy against the brute-force double sum: exact below the direct
    /// limit, within 1e-3 above it.
    #[test]
    fn potential_energy_equals_the_double_sum() {
        for (n, soft) in [(1, 0.0), (2, 0.0), (300, 0.01), (ENERGY_DIRECT_MAX, 0.01), (6000, 0.002), (20_000, 0.0)] {
            let (pos, mass, _) = halo::<3>(n, 11 + n as u64);
            let pos: Vec<[f64; 3]> = pos.iter().enumerate().map(|(i, p)| p.map(|c| c + 1e-7 * i as f64)).collect();
            let g = Gravity { g: 4.3, softening: soft };
            let eps2 = soft * soft;
            let mut brute = 0.0;
            for i in 0..n {
                let mut s = 0.0;
                for j in 0..n {
                    if j != i {
                        s += mass[j] / (dist2(&pos[i], &pos[j]) + eps2).sqrt();
                    }
                }
                brute += mass[i] * s;
            }
            let brute = -0.5 * g.g * brute;
            let w = potential_energy(&Members { pos: &pos, mass: &mass }, g);
            if n <= ENERGY_DIRECT_MAX {
                assert_eq!(w, brute, "n = {n}");
            } else {
                // A tenth of these members lie on a short line (the duplicates made distinct),
                // the worst case of a monopole expansion.
                assert!(((w - brute) / brute).abs() < 1e-2, "n = {n}: {w} vs {brute}");
                // Without them: a halo-like set.
                let keep: Vec<usize> = (0..n).filter(|i| i % 10 != 1).collect();
                let (p2, m2): (Vec<[f64; 3]>, Vec<f64>) = keep.iter().map(|&i| (pos[i], mass[i])).unzip();
                let mut b2 = 0.0;
                for i in 0..p2.len() {
                    let mut s = 0.0;
                    for j in 0..p2.len() {
                        if j != i {
                            s += m2[j] / (dist2(&p2[i], &p2[j]) + eps2).sqrt();
                        }
                    }
                    b2 += m2[i] * s;
                }
                let b2 = -0.5 * g.g * b2;
                let w2 = potential_energy(&Members { pos: &p2, mass: &m2 }, g);
                assert!(((w2 - b2) / b2).abs() < 1e-3, "n = {}: {w2} vs {b2}", p2.len());
                eprintln!("n = {n}: relative error {:.2e} with the line, {:.2e} without", ((w - brute) / brute).abs(), ((w2 - b2) / b2).abs());
            }
        }
    }

    /// Coincident members without softening: -inf, the first of them.
    #[test]
    fn coincident_members_without_softening() {
        let mut pos: Vec<[f64; 3]> = (0..2000).map(|i| [i as f64 * 0.01, 0.0, 0.0]).collect();
        pos[700] = pos[1500];
        let mass = vec![1.0; 2000];
        let (i, v) = minimum(&Members { pos: &pos, mass: &mass }, Gravity { g: 1.0, softening: 0.0 }, |_| 0.0);
        assert_eq!((i, v), (700, f64::NEG_INFINITY));
    }
}
