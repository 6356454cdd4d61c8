//! The integer dot with AVX2: `vpmaddubsw` multiplies 32 unsigned bytes by 32 signed bytes and
//! adds each adjacent two products into an i16, and `vpmaddwd` by ones adds those in pairs into 8
//! i32 lanes, so two instructions add a step of 4 inputs to 8 weight rows' outputs (the sequence
//! llama.cpp's AVX2 dot products use, `mul_sum_i8_pairs` in `ggml-cpu/arch/x86/quants.c`).
//!
//! The i16 sums saturate past 32,767, so the unsigned operand must stay small. Q4_0's nibbles
//! `q = w + 8` are at most 15: they are that operand, and a lane starts from `-8 Σ x` of its
//! token's block, as with VNNI. Q8_0's `w + 128` would overflow, so the weight's magnitude `|w|`
//! is the unsigned operand and its sign moves onto the activation (`vpsignb`): `|w| · sign(w) x
//! = w x`, each pair of products at most 2 × 128 × 127 = 32,512.
//!
//! With 16-bit activations the weights are widened instead (`vpmovsxbw`, once a register for
//! all the tile's tokens): `vpmaddwd` then multiplies 16 weights by a token's 4 activations
//! broadcast 4 times and adds pairs, so a register of 4 rows' 4 inputs gets 2 lanes a row. A
//! block's lanes are added in pairs at its end.

use std::arch::x86_64::*;

use super::kernel::{self, Activations, Format, Group, Rounding};
use crate::Q8_BLOCK;

pub(super) struct Kernel;

impl kernel::Kernel for Kernel {
    const GROUP: usize = 8;
    /// As many as with AVX-512, though the sums and dots then outnumber the 16 registers and a
    /// few live on the stack: each weight load (and its magnitude) serves more tokens, and 8 ran
    /// 8–12 % faster than 4 (which fits) at 128 and 512 tokens (`cargo bench -p decider-ops
    /// --bench ops -- cpu/`).
    const TILE: usize = 8;

    fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn round_block<T: Rounding>(block: &[f32], values: &mut [T]) -> (f32, i32) {
        kernel::round_block(block, values)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i8>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        // Lanes `0..rows` (all lanes but in a weight's last group).
        let lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(group.rows as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        let ones = _mm256_set1_epi16(1);
        let pair_bytes = group.rows * F::PAIR_BYTES;
        let load = |at: *const u8| {
            // SAFETY: the caller's (below): `at` holds `rows × 4` bytes; masked-off lanes are not
            // read (no fault) and are zero.
            unsafe { if group.full { _mm256_loadu_si256(at.cast()) } else { _mm256_maskload_epi32(at.cast(), lanes) } }
        };
        let mut sums = [_mm256_setzero_ps(); C];
        let pairs = Q8_BLOCK / 8 / F::SUBS;
        for b in 0..x.blocks {
            for h in 0..F::SUBS {
                let mut dots: [__m256i; C] = std::array::from_fn(|j| match (F::NIBBLES, F::MINS) {
                    (true, false) => _mm256_set1_epi32(-8 * x.sum(token + j, b, h)),
                    _ => _mm256_setzero_si256(),
                });
                // A loop, not 4 copies: unrolled, the compiler loaded all 8 steps' weights ahead and
                // spilled them to the stack (16 registers only).
                for pair in std::hint::black_box(h * pairs..(h + 1) * pairs) {
                    // SAFETY: the group holds `rows × PAIR_BYTES` bytes for each pair of steps.
                    let at = unsafe { group.weights.as_ptr().add((b * Q8_BLOCK / 8 + pair) * pair_bytes) };
                    let steps = if F::NIBBLES {
                        let (bytes, nibble) = (load(at), _mm256_set1_epi8(15));
                        [_mm256_and_si256(bytes, nibble), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble)]
                    } else {
                        // SAFETY: the pair's second step follows the first's `rows × 4` bytes.
                        [load(at), load(unsafe { at.add(group.rows * 4) })]
                    };
                    for (s, w) in steps.into_iter().enumerate() {
                        let magnitude = if F::NIBBLES { w } else { _mm256_abs_epi8(w) };
                        for (j, dot) in dots.iter_mut().enumerate() {
                            // SAFETY: token `token + j < n`, block `b` and step `2 pair + s < 8` are
                            // within the activations.
                            let four = _mm256_set1_epi32(unsafe {
                                x.four(token + j, b, 2 * pair + s).cast::<i32>().read_unaligned()
                            });
                            let signed = if F::NIBBLES { four } else { _mm256_sign_epi8(four, w) };
                            *dot = _mm256_add_epi32(
                                *dot,
                                _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed), ones),
                            );
                        }
                    }
                }
                // SAFETY: `scales` holds 8 lanes for each block (or half block).
                let weight_scales =
                    unsafe { _mm256_loadu_ps(group.scales.as_ptr().add((b * F::SUBS + h) * Self::GROUP)) };
                for (j, (sum, dot)) in sums.iter_mut().zip(dots).enumerate() {
                    let scale = _mm256_mul_ps(weight_scales, _mm256_set1_ps(x.scales[x.at(token + j, b)]));
                    *sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, *sum);
                }
            }
            if F::MINS {
                // `- m · Σ x` of each row's block, as in the AVX-512 kernel.
                // SAFETY: `mins` holds 8 lanes for each block of a format with mins.
                let mins = unsafe { _mm256_loadu_ps(group.mins.as_ptr().add(b * Self::GROUP)) };
                for (j, sum) in sums.iter_mut().enumerate() {
                    let at = x.at(token + j, b);
                    *sum = _mm256_fnmadd_ps(mins, _mm256_set1_ps(x.scales[at] * x.sum(token + j, b, 0) as f32), *sum);
                }
            }
        }
        for (j, sum) in sums.into_iter().enumerate() {
            // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
            unsafe {
                let at = out.add(j * d_out);
                if group.full { _mm256_storeu_ps(at, sum) } else { _mm256_maskstore_ps(at, lanes, sum) }
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn wide_tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i16>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        let lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(group.rows as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        let load = |at: *const u8| {
            // SAFETY: as in `tile`.
            unsafe { if group.full { _mm256_loadu_si256(at.cast()) } else { _mm256_maskload_epi32(at.cast(), lanes) } }
        };
        let mut sums = [_mm256_setzero_ps(); C];
        let steps = Q8_BLOCK / 4 / F::SUBS;
        for b in 0..x.blocks {
            for h in 0..F::SUBS {
                // Per token, rows 0–3 and rows 4–7: lanes `2 r` and `2 r + 1` hold row `r`'s inputs
                // `4 k, 4 k + 1` and `4 k + 2, 4 k + 3` summed over the steps `k`.
                let mut dots = [[_mm256_setzero_si256(); 2]; C];
                // A loop, as in `tile`: unrolled, the steps' weights would be loaded ahead and spilled.
                for step in std::hint::black_box(h * steps..(h + 1) * steps) {
                    // SAFETY: the group holds `rows × 4` bytes for each step.
                    let w = load(unsafe { group.weights.as_ptr().add((b * Q8_BLOCK / 4 + step) * group.rows * 4) });
                    let halves = [
                        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)),
                    ];
                    for (j, dots) in dots.iter_mut().enumerate() {
                        // SAFETY: token `token + j < n`, block `b` and step `< 8` are within the
                        // activations.
                        let four =
                            _mm256_set1_epi64x(unsafe { x.four(token + j, b, step).cast::<i64>().read_unaligned() });
                        for (dot, half) in dots.iter_mut().zip(halves) {
                            *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(half, four));
                        }
                    }
                }
                // SAFETY: `scales` holds 8 lanes for each block (or half block).
                let weight_scales =
                    unsafe { _mm256_loadu_ps(group.scales.as_ptr().add((b * F::SUBS + h) * Self::GROUP)) };
                for (j, (sum, [low, high])) in sums.iter_mut().zip(dots).enumerate() {
                    // Pairs added: rows 0, 1, 4, 5 | 2, 3, 6, 7; the 64-bit quarters reordered.
                    let dot = _mm256_permute4x64_epi64(_mm256_hadd_epi32(low, high), 0b11_01_10_00);
                    let scale = _mm256_mul_ps(weight_scales, _mm256_set1_ps(x.scales[x.at(token + j, b)]));
                    *sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, *sum);
                }
            }
        }
        for (j, sum) in sums.into_iter().enumerate() {
            // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
            unsafe {
                let at = out.add(j * d_out);
                if group.full { _mm256_storeu_ps(at, sum) } else { _mm256_maskstore_ps(at, lanes, sum) }
            }
        }
    }
}
