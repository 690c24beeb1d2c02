//! Offline window sums over acknowledged adds: for each window, the adds
//! invoked at or after `from_ns` and completed before `before_ns`, by
//! write level and sign.
//!
//! A Fenwick tree indexed by completion time is filled with the adds in
//! order of decreasing invocation while the windows are answered in order
//! of decreasing `from_ns`: `O((adds + windows) log adds)` for any number
//! of windows, where a scan per window would be quadratic.

/// Sums by write level (index into [`super::bounds::LEVELS`]) and sign
/// (`[positive, negative]`).
pub(super) type Sums = [[i64; 2]; 3];

/// An acknowledged add.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    /// When it was invoked.
    pub invoke_ns: u64,
    /// When it completed.
    pub complete_ns: u64,
    /// Its write level's index.
    pub level: usize,
    /// Its delta.
    pub delta: i64,
}

/// The adds invoked at or after `from_ns` and completed before `before_ns`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// Earliest invocation counted.
    pub from_ns: u64,
    /// Completions strictly before this count.
    pub before_ns: u64,
}

fn add_into(into: &mut Sums, from: &Sums) {
    for (a, b) in into.iter_mut().zip(from) {
        a[0] += b[0];
        a[1] += b[1];
    }
}

/// The sums of every window, in the order given.
pub(super) fn window_sums(points: &[Point], windows: &[Window]) -> Vec<Sums> {
    let mut completes: Vec<u64> = points.iter().map(|p| p.complete_ns).collect();
    completes.sort_unstable();
    let mut by_invoke: Vec<&Point> = points.iter().collect();
    by_invoke.sort_unstable_by_key(|p| std::cmp::Reverse(p.invoke_ns));
    let mut order: Vec<usize> = (0..windows.len()).collect();
    order.sort_unstable_by_key(|&i| std::cmp::Reverse(windows[i].from_ns));

    // 1-based; equal completion times share the first rank of their value,
    // so "rank < partition_point(< t)" is exactly "completed before t".
    let mut tree = vec![Sums::default(); completes.len() + 1];
    let mut out = vec![Sums::default(); windows.len()];
    let mut next = 0;
    for i in order {
        let w = windows[i];
        while let Some(p) = by_invoke.get(next).filter(|p| p.invoke_ns >= w.from_ns) {
            let mut sums = Sums::default();
            sums[p.level][usize::from(p.delta < 0)] = p.delta;
            let mut j = completes.partition_point(|&c| c < p.complete_ns) + 1;
            while j < tree.len() {
                add_into(&mut tree[j], &sums);
                j += j & j.wrapping_neg();
            }
            next += 1;
        }
        let mut j = completes.partition_point(|&c| c < w.before_ns);
        while j > 0 {
            add_into(&mut out[i], &tree[j]);
            j -= j & j.wrapping_neg();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn window_sums_match_a_scan() {
        let mut rng = SmallRng::seed_from_u64(5);
        for _ in 0..200 {
            let points: Vec<Point> = (0..rng.random_range(0..40))
                .map(|_| {
                    let invoke_ns = rng.random_range(0..50);
                    Point {
                        invoke_ns,
                        complete_ns: invoke_ns + rng.random_range(0..20),
                        level: rng.random_range(0..3),
                        delta: rng.random_range(-5..=5),
                    }
                })
                .collect();
            let windows: Vec<Window> = (0..20)
                .map(|_| Window {
                    from_ns: rng.random_range(0..60),
                    before_ns: rng.random_range(0..80),
                })
                .collect();
            let fast = window_sums(&points, &windows);
            for (w, got) in windows.iter().zip(&fast) {
                let mut want = Sums::default();
                for p in &points {
                    if p.invoke_ns >= w.from_ns && p.complete_ns < w.before_ns {
                        want[p.level][usize::from(p.delta < 0)] += p.delta;
                    }
                }
                assert_eq!(*got, want, "{w:?} over {points:?}");
            }
        }
    }
}
