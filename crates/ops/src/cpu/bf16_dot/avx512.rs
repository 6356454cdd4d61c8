//! The bf16 dot with AVX-512 BF16: a tile of [`ROWS`] weight rows × up to
//! [`TOKENS`](super::tile::TOKENS) tokens, 24 registers of partial sums (plus 4 of weights and 1
//! of activations: 29 of the 32), over all of a row's inputs (in blocks it was 6 % slower on
//! Intel, where one `vdpbf16ps` every other cycle bounds it).

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::tile::{ROWS, add_lanes};
use crate::half_matmul::bf16_of;

/// bf16 values a register holds: the inputs of one step.
const STEP: usize = 32;

/// Whether this CPU runs the kernel.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bf16")
}

/// `x` rounded to bf16 ([`bf16_of`]), in parallel, compiled for AVX-512 (where the rounding
/// vectorises: for the baseline it is a scalar loop, 10 % of a product's time).
///
/// # Safety
/// The CPU runs the kernel ([`available`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(super) unsafe fn round(x: &[f32]) -> Vec<u16> {
    let mut rounded = vec![0u16; x.len()];
    rounded.par_chunks_mut(1 << 14).zip(x.par_chunks(1 << 14)).for_each(|(rounded, x)| {
        // SAFETY: the caller's.
        unsafe { round_chunk(x, rounded) }
    });
    rounded
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn round_chunk(x: &[f32], rounded: &mut [u16]) {
    for (r, &v) in rounded.iter_mut().zip(x) {
        *r = bf16_of(v);
    }
}

/// One tile: `rows` weight rows of `d_in` bf16 values, one after another from `weights`, times
/// `tokens` rows of rounded activations from `x`.
pub(super) struct Tile<'a> {
    pub(super) weights: &'a [u16],
    pub(super) rows: usize,
    pub(super) x: &'a [u16],
    pub(super) tokens: usize,
    pub(super) d_in: usize,
}

impl Tile<'_> {
    /// Writes the tile's outputs: token `j`'s `rows` values at `out + j d_out`.
    ///
    /// # Safety
    /// The CPU runs the kernel ([`available`]); `weights` and `x` hold the tile's rows; `out`
    /// plus each token's row holds `rows` values.
    pub(super) unsafe fn run(&self, out: *mut f32, d_out: usize) {
        // SAFETY: the caller's.
        unsafe {
            match self.tokens {
                6 => self.tile::<6>(out, d_out),
                5 => self.tile::<5>(out, d_out),
                4 => self.tile::<4>(out, d_out),
                3 => self.tile::<3>(out, d_out),
                2 => self.tile::<2>(out, d_out),
                _ => self.tile::<1>(out, d_out),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    unsafe fn tile<const T: usize>(&self, out: *mut f32, d_out: usize) {
        let d_in = self.d_in;
        assert!(
            (1..=ROWS).contains(&self.rows)
                && self.tokens == T
                && self.weights.len() >= self.rows * d_in
                && self.x.len() >= T * d_in,
            "bf16 tile: {} rows and {} tokens of {d_in} do not fit the slices",
            self.rows,
            self.tokens
        );
        // A short tile reads its last row again in place of the missing ones and stores none of
        // their outputs: one code path, at the cost of work only a weight's last tile does.
        let row = |i: usize| self.weights[i.min(self.rows - 1) * d_in..].as_ptr();
        let weights: [*const u16; ROWS] = std::array::from_fn(row);
        let x = self.x.as_ptr();
        let mut sums = [[_mm512_setzero_ps(); ROWS]; T];
        let steps = d_in / STEP;
        for step in 0..steps {
            let k = step * STEP;
            // SAFETY: `k + 32 <= d_in`: within each row and token (checked above).
            let w = weights.map(|row| unsafe { bf16s(_mm512_loadu_si512(row.add(k).cast())) });
            for (j, sums) in sums.iter_mut().enumerate() {
                // SAFETY: as above.
                let a = unsafe { bf16s(_mm512_loadu_si512(x.add(j * d_in + k).cast())) };
                for (sum, w) in sums.iter_mut().zip(w) {
                    *sum = _mm512_dpbf16_ps(*sum, w, a);
                }
            }
        }
        let tail = d_in - steps * STEP;
        if tail > 0 {
            let (k, mask) = (steps * STEP, (1u32 << tail) - 1);
            // SAFETY: the masked loads read the `tail` values left in each row and token (and
            // fault on none past them); the rest are zero in both operands.
            let w = weights.map(|row| unsafe { bf16s(_mm512_maskz_loadu_epi16(mask, row.add(k).cast())) });
            for (j, sums) in sums.iter_mut().enumerate() {
                // SAFETY: as above.
                let a = unsafe { bf16s(_mm512_maskz_loadu_epi16(mask, x.add(j * d_in + k).cast())) };
                for (sum, w) in sums.iter_mut().zip(w) {
                    *sum = _mm512_dpbf16_ps(*sum, w, a);
                }
            }
        }
        let store = (1u8 << self.rows) - 1;
        for (j, sums) in sums.into_iter().enumerate() {
            // SAFETY: the caller's: `out + j d_out` holds the tile's `rows` columns.
            unsafe { _mm_mask_storeu_ps(out.add(j * d_out), store, add_lanes(sums)) };
        }
    }
}

/// 32 bf16 values loaded as integers, as the dot reads them.
#[inline(always)]
fn bf16s(v: __m512i) -> __m512bh {
    // SAFETY: both are 64 bytes of plain lanes; every pattern is a valid value of either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}
