//! What both kernels' tiles share: their size, and the sum of an output's lanes.

use std::arch::x86_64::*;

/// Tokens a tile of either kernel multiplies (the last tile of a product may have fewer).
pub(super) const TOKENS: usize = 6;
/// Weight rows a tile of either kernel multiplies (a panel's last tile may have fewer).
pub(super) const ROWS: usize = 4;

/// The sums of the 16 lanes of each of 4 registers, in one register: halves added, then
/// pairwise (`vhaddps`) twice, 12 instructions where 4 full reductions take 28.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn add_lanes(sums: [__m512; ROWS]) -> __m128 {
    let halves = sums.map(|s| {
        let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
        _mm256_add_ps(_mm512_castps512_ps256(s), high)
    });
    // [r0 01, r0 23, r1 01, r1 23 | r0 45, r0 67, r1 45, r1 67], then the same for rows 2 and 3.
    let (first, second) = (_mm256_hadd_ps(halves[0], halves[1]), _mm256_hadd_ps(halves[2], halves[3]));
    // [r0 0–3, r1 0–3, r2 0–3, r3 0–3 | the same of lanes 4–7].
    let quarters = _mm256_hadd_ps(first, second);
    _mm_add_ps(_mm256_castps256_ps128(quarters), _mm256_extractf128_ps::<1>(quarters))
}
