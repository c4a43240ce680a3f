//! Subset-sum tests shared by the checkers: may some subset of the candidate writes add up to
//! what was observed?
//!
//! Invariant: every test here is sound for pruning — it never answers no when the true answer is
//! yes; it is exact for small non-negative integers (below 2^24, where `f32` sums are exact) and
//! falls back to bounds otherwise.

use std::collections::HashSet;

/// Whether some subset of `values` sums to `target`: exactly for small integers, else by bounds.
pub(super) fn subset_sum_reaches(values: &[f64], target: f64) -> bool {
    const EXACT: f64 = (1u64 << 24) as f64;
    let integral = |x: f64| x.fract() == 0.0 && x.abs() < EXACT;
    if integral(target) && values.iter().all(|&v| integral(v)) {
        let mut sums: HashSet<i64> = HashSet::from([0]);
        for &v in values {
            let v = v as i64;
            let next: Vec<i64> = sums.iter().map(|s| s + v).collect();
            sums.extend(next);
            if sums.len() > 1 << 16 {
                return within_bounds(values, target);
            }
        }
        return sums.contains(&(target as i64));
    }
    within_bounds(values, target)
}

fn within_bounds(values: &[f64], target: f64) -> bool {
    let lo: f64 = values.iter().filter(|v| **v < 0.0).sum();
    let hi: f64 = values.iter().filter(|v| **v > 0.0).sum();
    let slack = 1e-3 * (1.0 + lo.abs() + hi.abs() + target.abs());
    target >= lo - slack && target <= hi + slack
}

/// Whether some subset of `items` (vectors of small non-negative integers) may sum to `target`:
/// exactly, by a dynamic program over the grid of partial sums bounded by the target (items are
/// non-negative, so no partial sum above it matters); rows index all components but the last,
/// each row a bitset of the last. For targets too large for that it checks each component
/// separately, which can only say yes too often. Sound for pruning either way: it never says no
/// when the answer is yes.
pub(super) fn vector_subset_hits(target: &[f64], items: &[&[f32]]) -> bool {
    if target.iter().any(|&t| t < 0.0 || t.fract() != 0.0) {
        return false;
    }
    let dims = target.len();
    let t: Vec<usize> = target.iter().map(|&x| x as usize).collect();
    let rows: usize = t[..dims - 1].iter().map(|&x| x + 1).product();
    if dims == 1 || t[dims - 1] >= 64 || rows > 1 << 12 {
        return (0..dims).all(|c| {
            let column: Vec<f32> = items.iter().map(|v| v[c]).collect();
            subset_sum_hits(target[c], &column)
        });
    }
    let last = dims - 1;
    let mask = if t[last] == 63 {
        u64::MAX
    } else {
        (1u64 << (t[last] + 1)) - 1
    };
    let mut grid = vec![0u64; rows];
    grid[0] = 1;
    let mut coords = vec![0usize; last];
    for item in items {
        if item.iter().zip(&t).any(|(&v, &tc)| v as usize > tc) {
            continue;
        }
        let shift = item[last] as usize;
        // Rows from the highest down, so that each item is used at most once.
        for r in (0..rows).rev() {
            if grid[r] == 0 {
                continue;
            }
            // Destination row: add the item's leading components, if they stay within bounds.
            let mut rest = r;
            for (c, coord) in coords.iter_mut().enumerate() {
                *coord = rest % (t[c] + 1);
                rest /= t[c] + 1;
            }
            let mut dest = 0;
            let mut stride = 1;
            let mut fits = true;
            for c in 0..last {
                let x = coords[c] + item[c] as usize;
                if x > t[c] {
                    fits = false;
                    break;
                }
                dest += x * stride;
                stride *= t[c] + 1;
            }
            if fits {
                grid[dest] |= (grid[r] << shift) & mask;
            }
        }
    }
    grid[rows - 1] & (1 << t[last]) != 0
}

/// Whether some subset of `items` (small non-negative integers) sums to `target`.
fn subset_sum_hits(target: f64, items: &[f32]) -> bool {
    if target < 0.0 || target.fract() != 0.0 {
        return false;
    }
    let shifts: Vec<u64> = items.iter().map(|&v| v as u64).collect();
    bitset_subset_hits(target as u64, &shifts)
}

fn bitset_subset_hits(target: u64, items: &[u64]) -> bool {
    let total: u64 = items.iter().sum();
    if target > total {
        return false;
    }
    let target = target as usize;
    let words = target / 64 + 1;
    let mut bits = vec![0u64; words];
    bits[0] = 1;
    for &item in items {
        let shift = item as usize;
        if shift == 0 || shift > target {
            continue;
        }
        let (w, b) = (shift / 64, shift % 64);
        for i in (w..words).rev() {
            let mut moved = bits[i - w] << b;
            if b > 0 && i > w {
                moved |= bits[i - w - 1] >> (64 - b);
            }
            bits[i] |= moved;
        }
        if bits[target / 64] & (1 << (target % 64)) != 0 {
            return true;
        }
    }
    bits[target / 64] & (1 << (target % 64)) != 0
}
