//! The bf16 matmul with f32 FMAs: each task widens its panel of bf16 weight rows to f32 once
//! (exact: a bf16 is the top half of its f32) and multiplies it with every token's activations,
//! rounded to bf16 and held as f32, so the products are the bf16 dot's. For Intel's CPUs, whose
//! FMAs do twice their `vdpbf16ps`'s multiply-adds (chosen by vendor and token count,
//! [`super::Bf16Isa::best`]), and for AVX-512 CPUs without AVX-512 BF16.
//!
//! The tile is the bf16 dot's ([`super::avx512`]) with f32 operands: [`ROWS`] weight rows × up to
//! [`TOKENS`](super::tile::TOKENS) tokens, 16 inputs a step, an output's lanes added at the end
//! of a block.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::tile::{ROWS, add_lanes};
use crate::half_matmul::bf16_of;

/// f32 values a register holds: the inputs of one step.
pub(super) const STEP: usize = 16;

/// Whether this CPU runs the kernel.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
}

/// `x` rounded to bf16 ([`bf16_of`]) and widened back to f32, in parallel, compiled for AVX-512
/// (where the rounding vectorises).
///
/// # Safety
/// The CPU runs the kernel ([`available`]).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn round(x: &[f32]) -> Vec<f32> {
    let mut rounded = vec![0f32; x.len()];
    rounded.par_chunks_mut(1 << 14).zip(x.par_chunks(1 << 14)).for_each(|(rounded, x)| {
        // SAFETY: the caller's.
        unsafe { round_chunk(x, rounded) }
    });
    rounded
}

#[target_feature(enable = "avx512f")]
unsafe fn round_chunk(x: &[f32], rounded: &mut [f32]) {
    for (r, &v) in rounded.iter_mut().zip(x) {
        *r = f32::from_bits(u32::from(bf16_of(v)) << 16);
    }
}

/// The f32 values of a panel of weight rows (`bits [rows, d_in]`, bf16 patterns) in the order
/// the tiles read them: for each quad of rows, for each step of 16 inputs, the quad's 4 rows'
/// 16 values, so that a tile reads one sequential stream of weights. Rows past the panel's and
/// inputs past `d_in` are zero. Compiled for AVX-512 (a shift a value, vectorised).
///
/// # Safety
/// The CPU runs the kernel ([`available`]).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn widen_panel(bits: &[u16], d_in: usize) -> Vec<f32> {
    let rows = bits.len() / d_in;
    let mut packed = vec![0f32; rows.div_ceil(ROWS) * quad_len(d_in)];
    for (r, row) in bits.chunks_exact(d_in).enumerate() {
        let quad = &mut packed[r / ROWS * quad_len(d_in)..];
        for (step, values) in row.chunks(STEP).enumerate() {
            let at = &mut quad[(step * ROWS + r % ROWS) * STEP..][..values.len()];
            for (w, &b) in at.iter_mut().zip(values) {
                *w = f32::from_bits(u32::from(b) << 16);
            }
        }
    }
    packed
}

/// The length [`widen_panel`] gives one quad of rows of `d_in` inputs; the block of inputs from
/// `k` (a whole number of steps) starts `k × ROWS` values into it.
pub(super) fn quad_len(d_in: usize) -> usize {
    d_in.div_ceil(STEP) * ROWS * STEP
}

/// One tile: `depth` inputs of `rows` weight rows from `weights` (a quad of [`widen_panel`]
/// from the block's first step), times the same inputs of `tokens` rows of activations,
/// `stride` apart from `x`.
pub(super) struct Tile<'a> {
    pub(super) weights: &'a [f32],
    pub(super) rows: usize,
    pub(super) x: &'a [f32],
    pub(super) tokens: usize,
    pub(super) depth: usize,
    pub(super) stride: usize,
}

impl Tile<'_> {
    /// Writes the tile's outputs, or adds them to the values there (`accumulate`): token `j`'s
    /// `rows` values at `out + j d_out`.
    ///
    /// # Safety
    /// The CPU runs the kernel ([`available`]); `out` plus each token's row holds `rows` values
    /// (written before, to `accumulate`).
    pub(super) unsafe fn run(&self, out: *mut f32, d_out: usize, accumulate: bool) {
        // SAFETY: the caller's.
        unsafe {
            match self.tokens {
                6 => self.tile::<6>(out, d_out, accumulate),
                5 => self.tile::<5>(out, d_out, accumulate),
                4 => self.tile::<4>(out, d_out, accumulate),
                3 => self.tile::<3>(out, d_out, accumulate),
                2 => self.tile::<2>(out, d_out, accumulate),
                _ => self.tile::<1>(out, d_out, accumulate),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn tile<const T: usize>(&self, out: *mut f32, d_out: usize, accumulate: bool) {
        let (depth, stride) = (self.depth, self.stride);
        assert!(
            (1..=ROWS).contains(&self.rows)
                && self.tokens == T
                && depth <= stride
                && self.weights.len() >= quad_len(depth)
                && self.x.len() >= (T - 1) * stride + depth,
            "bf16 fma tile: {} rows and {} tokens of {depth} inputs {stride} apart do not fit the slices",
            self.rows,
            self.tokens
        );
        // A short tile multiplies the zero rows of its quad and stores none of their outputs.
        let weights = self.weights.as_ptr();
        let x = self.x.as_ptr();
        let mut sums = [[_mm512_setzero_ps(); ROWS]; T];
        let steps = depth / STEP;
        for step in 0..steps {
            let k = step * STEP;
            // SAFETY: step `step` of the quad holds `ROWS × 16` values (checked above); `k + 16
            // <= depth`: within each token.
            let w: [__m512; ROWS] =
                std::array::from_fn(|i| unsafe { _mm512_loadu_ps(weights.add((step * ROWS + i) * STEP)) });
            for (j, sums) in sums.iter_mut().enumerate() {
                // SAFETY: as above.
                let a = unsafe { _mm512_loadu_ps(x.add(j * stride + k)) };
                for (sum, w) in sums.iter_mut().zip(w) {
                    *sum = _mm512_fmadd_ps(w, a, *sum);
                }
            }
        }
        let tail = depth - steps * STEP;
        if tail > 0 {
            let (k, mask) = (steps * STEP, ((1u32 << tail) - 1) as u16);
            // SAFETY: the quad's last step holds `ROWS × 16` values, zero past `d_in`; the masked
            // loads read the `tail` values left in each token (and fault on none past them).
            let w: [__m512; ROWS] =
                std::array::from_fn(|i| unsafe { _mm512_loadu_ps(weights.add((steps * ROWS + i) * STEP)) });
            for (j, sums) in sums.iter_mut().enumerate() {
                // SAFETY: as above.
                let a = unsafe { _mm512_maskz_loadu_ps(mask, x.add(j * stride + k)) };
                for (sum, w) in sums.iter_mut().zip(w) {
                    *sum = _mm512_fmadd_ps(w, a, *sum);
                }
            }
        }
        let store = (1u8 << self.rows) - 1;
        for (j, sums) in sums.into_iter().enumerate() {
            let at = out.wrapping_add(j * d_out);
            let mut sums = add_lanes(sums);
            // SAFETY: the caller's: `out + j d_out` holds the tile's `rows` columns (written
            // before, to accumulate); the masked load and store touch no others.
            unsafe {
                if accumulate {
                    sums = _mm_add_ps(sums, _mm_maskz_loadu_ps(store, at));
                }
                _mm_mask_storeu_ps(at, store, sums);
            }
        }
    }
}
