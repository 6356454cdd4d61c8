//! The integer dot with AVX-512 VNNI: `vpdpbusd` multiplies 64 unsigned bytes by 64 signed
//! bytes and adds each run of four products into one of 16 i32 lanes, so one instruction adds a
//! step of 4 inputs to 16 weight rows' outputs.
//!
//! The weights are the unsigned operand, read as `w + bias`: Q8_0's i8 with the top bit flipped
//! (bias 128), Q4_0's nibbles as they are (bias 8). A lane thus gets `Σ (w + bias) x = Σ w x +
//! bias Σ x` and starts from `-bias Σ x` of its token's block.
//!
//! With 16-bit activations, `vpdpwssd` multiplies signed 16-bit pairs: the weights are widened
//! (`vpmovsxbw`, once a register for all the tile's tokens), and a register of 8 rows' 4 inputs
//! gets 2 lanes a row from a token's 4 activations broadcast 8 times. A block's lanes are added
//! in pairs at its end.

use std::arch::x86_64::*;

use super::kernel::{self, Activations, Format, Group, Rounding};
use crate::Q8_BLOCK;

pub(super) struct Kernel;

impl kernel::Kernel for Kernel {
    const GROUP: usize = 16;
    /// 8 of the 32 registers hold the f32 sums and up to 16 the i32 dots.
    const TILE: usize = 8;

    fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn round_block<T: Rounding>(block: &[f32], values: &mut [T]) -> (f32, i32) {
        kernel::round_block(block, values)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i8>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        let bias: i32 = match (F::NIBBLES, F::MINS) {
            (true, true) => 0,
            (true, false) => 8,
            (false, _) => 128,
        };
        let byte_mask: u64 = if group.full { !0 } else { (1u64 << (group.rows * 4)) - 1 };
        let lane_mask: u16 = if group.full { !0 } else { (1u16 << group.rows) - 1 };
        let pair_bytes = group.rows * F::PAIR_BYTES;
        let mut sums = [_mm512_setzero_ps(); C];
        let pairs = Q8_BLOCK / 8 / F::SUBS;
        for b in 0..x.blocks {
            for h in 0..F::SUBS {
                let mut dots: [__m512i; C] = std::array::from_fn(|j| _mm512_set1_epi32(-bias * x.sum(token + j, b, h)));
                for pair in h * pairs..(h + 1) * pairs {
                    // SAFETY: the group holds `rows × PAIR_BYTES` bytes for each pair of steps.
                    let w = unsafe {
                        pair_of::<F>(
                            group.weights.as_ptr().add((b * Q8_BLOCK / 8 + pair) * pair_bytes),
                            group.rows,
                            byte_mask,
                        )
                    };
                    for (j, dot) in dots.iter_mut().enumerate() {
                        // SAFETY: token `token + j < n`, block `b`, steps `2 pair` and `2 pair + 1`
                        // are within the activations.
                        let [first, second] = unsafe {
                            [x.four(token + j, b, 2 * pair), x.four(token + j, b, 2 * pair + 1)]
                                .map(|at| at.cast::<i32>().read_unaligned())
                        };
                        *dot = _mm512_dpbusd_epi32(*dot, w[0], _mm512_set1_epi32(first));
                        *dot = _mm512_dpbusd_epi32(*dot, w[1], _mm512_set1_epi32(second));
                    }
                }
                // SAFETY: `scales` holds 16 lanes for each block (or half block).
                let weight_scales =
                    unsafe { _mm512_loadu_ps(group.scales.as_ptr().add((b * F::SUBS + h) * Self::GROUP)) };
                for (j, (sum, dot)) in sums.iter_mut().zip(dots).enumerate() {
                    let scale = _mm512_mul_ps(weight_scales, _mm512_set1_ps(x.scales[x.at(token + j, b)]));
                    *sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *sum);
                }
            }
            if F::MINS {
                // `- m · Σ x` of each row's block: the min times the token's block sum, scaled.
                // SAFETY: `mins` holds 16 lanes for each block of a format with mins.
                let mins = unsafe { _mm512_loadu_ps(group.mins.as_ptr().add(b * Self::GROUP)) };
                for (j, sum) in sums.iter_mut().enumerate() {
                    let at = x.at(token + j, b);
                    *sum = _mm512_fnmadd_ps(mins, _mm512_set1_ps(x.scales[at] * x.sum(token + j, b, 0) as f32), *sum);
                }
            }
        }
        for (j, sum) in sums.into_iter().enumerate() {
            // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
            unsafe { _mm512_mask_storeu_ps(out.add(j * d_out), lane_mask, sum) };
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn wide_tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i16>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        let byte_mask: u64 = if group.full { !0 } else { (1u64 << (group.rows * 4)) - 1 };
        let lane_mask: u16 = if group.full { !0 } else { (1u16 << group.rows) - 1 };
        // Lane `r` of a block's dot: lane `2 r` (`2 r + 1`) of rows 0–7 for `r < 8`, of rows
        // 8–15 (the second operand, indices from 16) for the rest.
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        let mut sums = [_mm512_setzero_ps(); C];
        let steps = Q8_BLOCK / 4 / F::SUBS;
        for b in 0..x.blocks {
            for h in 0..F::SUBS {
                // Per token, rows 0–7 and rows 8–15: lanes `2 r` and `2 r + 1` hold row `r`'s inputs
                // `4 k, 4 k + 1` and `4 k + 2, 4 k + 3` summed over the steps `k`.
                let mut dots = [[_mm512_setzero_si512(); 2]; C];
                for step in h * steps..(h + 1) * steps {
                    // SAFETY: the group holds `rows × 4` bytes for each step; masked-off bytes are
                    // not read (no fault) and are zero.
                    let w = unsafe {
                        _mm512_maskz_loadu_epi8(
                            byte_mask,
                            group.weights.as_ptr().add((b * Q8_BLOCK / 4 + step) * group.rows * 4).cast(),
                        )
                    };
                    let halves = [
                        _mm512_cvtepi8_epi16(_mm512_castsi512_si256(w)),
                        _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(w)),
                    ];
                    for (j, dots) in dots.iter_mut().enumerate() {
                        // SAFETY: token `token + j < n`, block `b` and step `< 8` are within the
                        // activations.
                        let four =
                            _mm512_set1_epi64(unsafe { x.four(token + j, b, step).cast::<i64>().read_unaligned() });
                        for (dot, half) in dots.iter_mut().zip(halves) {
                            *dot = _mm512_dpwssd_epi32(*dot, half, four);
                        }
                    }
                }
                // SAFETY: `scales` holds 16 lanes for each block (or half block).
                let weight_scales =
                    unsafe { _mm512_loadu_ps(group.scales.as_ptr().add((b * F::SUBS + h) * Self::GROUP)) };
                for (j, (sum, [low, high])) in sums.iter_mut().zip(dots).enumerate() {
                    let dot = _mm512_add_epi32(
                        _mm512_permutex2var_epi32(low, even, high),
                        _mm512_permutex2var_epi32(low, odd, high),
                    );
                    let scale = _mm512_mul_ps(weight_scales, _mm512_set1_ps(x.scales[x.at(token + j, b)]));
                    *sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *sum);
                }
            }
        }
        for (j, sum) in sums.into_iter().enumerate() {
            // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
            unsafe { _mm512_mask_storeu_ps(out.add(j * d_out), lane_mask, sum) };
        }
    }
}

/// The two steps' weights of a group of `rows` rows at `at` (`rows × PAIR_BYTES` bytes; `mask`
/// selects each step's `rows × 4` bytes) as unsigned bytes `w + bias`, one register a step.
///
/// # Safety
/// The CPU has AVX-512BW and `at` holds the group's bytes of this pair.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pair_of<F: Format>(at: *const u8, rows: usize, mask: u64) -> [__m512i; 2] {
    // SAFETY: the caller's; masked-off bytes are not read (no fault) and are zero.
    if F::NIBBLES {
        let bytes = unsafe { _mm512_maskz_loadu_epi8(mask, at.cast()) };
        let nibble = _mm512_set1_epi8(15);
        [_mm512_and_si512(bytes, nibble), _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble)]
    } else {
        let flip = _mm512_set1_epi8(i8::MIN);
        let (first, second) = unsafe {
            (_mm512_maskz_loadu_epi8(mask, at.cast()), _mm512_maskz_loadu_epi8(mask, at.add(rows * 4).cast()))
        };
        [_mm512_xor_si512(first, flip), _mm512_xor_si512(second, flip)]
    }
}
