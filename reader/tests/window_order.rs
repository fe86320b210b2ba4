//! The windowed shuffle against a re-implementation of docs/FORMAT.md
//! section 14.2.1 written from the text (using only the version-2 order of
//! section 14.2, which `order_versions.rs` checks independently).

use tessera_reader::order::view_pieces;
use tessera_reader::{EpochOrder, OrderVersion};

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn perm2(n: u64, seed: u64, epoch: u64) -> Vec<u64> {
    let o = EpochOrder::shuffled_as(OrderVersion::V2, n, seed, epoch);
    (0..n).map(|p| o.get(p)).collect()
}

/// Section 14.2.1, step by step.
fn by_the_text(pieces: &[(u64, u64)], w: usize, seed: u64, epoch: u64) -> Vec<u64> {
    let m = pieces.len() as u64;
    let p = perm2(m, mix(seed ^ 0x7465_7373_6572_6133), epoch);
    let q: Vec<(u64, u64)> = p.iter().map(|&j| pieces[j as usize]).collect();
    let mut c = vec![0u64];
    for (a, b) in &q {
        c.push(c.last().unwrap() + (b - a));
    }
    let mut out = Vec::new();
    let windows = q.len().div_ceil(w);
    for t in 0..windows {
        let first = t * w;
        let end = ((t + 1) * w).min(q.len());
        let n_t = c[end] - c[first];
        let sigma = perm2(
            n_t,
            mix(seed ^ mix(0x7465_7373_6572_6134 ^ t as u64)),
            epoch,
        );
        for pos in 0..n_t {
            let r = sigma[pos as usize];
            let abs = c[first] + r;
            let i = (first..end)
                .find(|&i| c[i] <= abs && abs < c[i + 1])
                .unwrap();
            out.push(q[i].0 + (abs - c[i]));
        }
    }
    out
}

fn windowed(
    sizes: &[u64],
    view: std::ops::Range<u64>,
    w: usize,
    seed: u64,
    epoch: u64,
) -> Vec<u64> {
    let o = EpochOrder::windowed(view_pieces(sizes.iter().copied(), view), w, seed, epoch);
    let mut v = Vec::new();
    o.extend_records(0..o.len(), &mut v);
    v
}

/// Shard sizes, the view, the window width, seed and epoch.
type Case<'a> = (&'a [u64], std::ops::Range<u64>, usize, u64, u64);

#[test]
fn the_order_is_the_one_the_format_defines() {
    let cases: &[Case] = &[
        (&[4, 3, 5], 0..12, 2, 7, 0),
        (&[100, 80, 100, 1, 300, 70_000], 0..70_581, 2, 1, 4),
        (&[10, 10, 10, 10], 5..33, 3, 99, 2),
        (&[1000; 9], 0..9000, 1, 0, 0),
        (&[1000; 9], 0..9000, 9, 0, 1),
    ];
    for (sizes, view, w, seed, epoch) in cases {
        let pieces: Vec<(u64, u64)> = view_pieces(sizes.iter().copied(), view.clone())
            .into_iter()
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(
            windowed(sizes, view.clone(), *w, *seed, *epoch),
            by_the_text(&pieces, *w, *seed, *epoch),
            "{sizes:?} {view:?} w={w}"
        );
    }
}

#[test]
fn the_test_vector_of_the_format_page() {
    assert_eq!(
        windowed(&[4, 3, 5], 0..12, 2, 7, 0),
        vec![6, 2, 4, 1, 3, 0, 5, 7, 8, 11, 10, 9]
    );
}
