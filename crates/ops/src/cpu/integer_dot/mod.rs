//! The Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matmuls as an integer dot on x86-64: 8-bit products summed in i32 lanes,
//! one lane per weight row, with AVX-512 VNNI ([`avx512`]: `vpdpbusd`, 16 lanes) where the CPU
//! has it, else with AVX2 ([`avx2`]: `vpmaddubsw` then `vpmaddwd`, 8 lanes), which every x86-64
//! CPU of the last ten years has (and the one a virtual machine may be left with when its host
//! hides AVX-512).
//!
//! The layouts ([`q8_layout`], [`q4_layout`]) make the lanes weight rows: in each group of rows
//! (16 or 8, [`DotIsa::group`]), the rows' 4 values of inputs `k..k+4` lie side by side, so one
//! register of weights times a token's 4 activation bytes broadcast to every lane adds 4 inputs'
//! products to a group's outputs. Eight such steps cover a block of 32 inputs; the block's
//! integer sums are then scaled (weight scale × activation scale) into f32 accumulators. The f32
//! work is thus one step per 8 integer steps, where a dot product per output (llama.cpp's
//! `ggml_vec_dot_q8_0_q8_0`) pays it every step. Activations rounded to 16 bits
//! ([`crate::ActivationBits::Sixteen`]) take a second tile ([`Kernel::wide_tile`]): the same
//! weight registers widened to 16 bits, 2 inputs a lane (`vpmaddwd`, VNNI's `vpdpwssd`).
//!
//! Signs: both instructions want one operand unsigned. Each kernel says how it reads the weights
//! ([`avx512`] as unsigned bytes `w + bias`, a lane then starting from `-bias Σ x` of its
//! token's block; [`avx2`] as `|w|`, the sign moved onto the activation, for Q8_0); Q4_0's
//! nibbles are `q = w + 8`, unsigned already, for both. Q4_K's nibbles are Q4_0's in the same
//! layout, standing for `s · q - m` with a scale and a min a block ([`q4k_matmul`]): a lane starts
//! from 0, and the block adds `- m · Σ x` (its scale applied) after its scaled dot. Q5_K's 5-bit
//! values are Q8_0's bytes in Q8_0's layout with Q4_K's scales and mins ([`q5k_matmul`]). Q6_K's
//! values `q - 32` are Q8_0's bytes in the same layout, with a scale a half block of 16
//! ([`q6k_matmul`]): each half's dot is scaled on its own (its bias from the half's sum).

use half::f16;
use rayon::prelude::*;

use crate::cpu::out_ptr::OutPtr;
use crate::ggml_type::QK_K;
use crate::instructions::{Instructions, instruction_ceiling};
use crate::{ActivationBits, Q4_ACTIVATION_BITS, Q4_BLOCK, Q8_BLOCK};
use kernel::{Activations, Format, Group, Kernel, Q4, Q4K, Q5K, Q6K, Q8, Rounding};

mod avx2;
mod avx512;
mod kernel;

/// An integer-dot kernel, by the instructions it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotIsa {
    /// AVX-512 VNNI (with AVX-512BW): Intel Xeon since Cascade Lake and Core since Ice Lake, AMD
    /// since Zen 4.
    Avx512Vnni,
    /// AVX2 (with FMA): Intel since Haswell, AMD since Zen.
    Avx2,
}

impl DotIsa {
    /// Every kernel, fastest first.
    pub const ALL: [DotIsa; 2] = [DotIsa::Avx512Vnni, DotIsa::Avx2];

    /// The fastest this CPU runs under the process's [`Instructions`] ceiling, if any.
    pub fn best() -> Option<DotIsa> {
        let ceiling = instruction_ceiling();
        Self::ALL.into_iter().find(|isa| isa.family() <= ceiling && isa.available())
    }

    /// The family it belongs to.
    pub fn family(self) -> Instructions {
        match self {
            DotIsa::Avx512Vnni => Instructions::Avx512,
            DotIsa::Avx2 => Instructions::Avx2,
        }
    }

    /// Whether this CPU runs it (checked once by the standard library, then cached).
    pub fn available(self) -> bool {
        match self {
            DotIsa::Avx512Vnni => avx512::Kernel::available(),
            DotIsa::Avx2 => avx2::Kernel::available(),
        }
    }

    /// What it is, in words.
    pub fn about(self) -> &'static str {
        match self {
            DotIsa::Avx512Vnni => "AVX-512 VNNI integer dot (vpdpbusd)",
            DotIsa::Avx2 => "AVX2 integer dot (vpmaddubsw, vpmaddwd)",
        }
    }

    /// Weight rows per group: the i32 lanes of its registers, and so its layouts' interleave.
    pub fn group(self) -> usize {
        match self {
            DotIsa::Avx512Vnni => avx512::Kernel::GROUP,
            DotIsa::Avx2 => avx2::Kernel::GROUP,
        }
    }
}

/// The values of each weight `[d_out, d_in]` of a stack regrouped as `isa`'s Q8_0 kernel reads
/// them: for each group of [`DotIsa::group`] rows (the last may have fewer, `r`), for each `k`
/// step of 4 inputs, `r × 4` bytes (row by row, 4 inputs each). A permutation: the same values,
/// the same count.
pub fn q8_layout(isa: DotIsa, values: &[i8], d_out: usize, d_in: usize) -> Vec<i8> {
    regroup(isa.group(), values, d_out, d_in, |grouped, rows, width| {
        for (r, row) in rows.chunks_exact(d_in).enumerate() {
            for (step, four) in row.chunks_exact(4).enumerate() {
                grouped[step * width * 4 + r * 4..][..4].copy_from_slice(four);
            }
        }
    })
}

/// The packed bytes of each Q4_0 weight `[d_out, d_in / 2]` of a stack regrouped as `isa`'s
/// Q4_0 kernel reads them: for each group of [`DotIsa::group`] rows (the last may have fewer,
/// `r`), for each pair of `k` steps (8 inputs), `r × 4` bytes (row by row): byte `i` holds input
/// `8 p + i` in its low nibble and input `8 p + 4 + i` in its high one. The same values, the
/// same count of bytes.
pub fn q4_layout(isa: DotIsa, packed: &[u8], d_out: usize, d_in: usize) -> Vec<u8> {
    let row_bytes = d_in / 2;
    regroup(isa.group(), packed, d_out, row_bytes, |grouped, rows, width| {
        const HALF: usize = Q4_BLOCK / 2;
        for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
            // Input `i` of the row: in block `i / 32`, byte `i % 16`, low nibble for the first 16.
            let value = |i: usize| {
                let byte = row[i / Q4_BLOCK * HALF + i % HALF];
                if i % Q4_BLOCK < HALF { byte & 15 } else { byte >> 4 }
            };
            for pair in 0..d_in / 8 {
                for k in 0..4 {
                    grouped[pair * width * 4 + r * 4 + k] = value(8 * pair + k) | (value(8 * pair + 4 + k) << 4);
                }
            }
        }
    })
}

/// Applies `fill(grouped, rows, width)` to each group of up to `group` rows (`width` of them) of
/// each weight `[d_out, _]` of a stack held as `row_bytes` elements a row; in parallel over
/// groups, which never cross a weight.
fn regroup<T: Copy + Default + Send + Sync>(
    group: usize,
    values: &[T],
    d_out: usize,
    row_bytes: usize,
    fill: impl Fn(&mut [T], &[T], usize) + Sync,
) -> Vec<T> {
    let mut grouped = vec![T::default(); values.len()];
    if values.is_empty() || row_bytes == 0 {
        return grouped;
    }
    let weight = d_out * row_bytes;
    debug_assert_eq!(values.len() % weight, 0);
    let weights = grouped.par_chunks_mut(weight).zip(values.par_chunks(weight));
    weights
        .flat_map(|(grouped, weight)| {
            grouped.par_chunks_mut(group * row_bytes).zip(weight.par_chunks(group * row_bytes))
        })
        .for_each(|(grouped, rows)| fill(grouped, rows, rows.len() / row_bytes));
    grouped
}

/// `round(x) [n, d_in] · Wᵀ -> [n, d_out]`: `W` as Q8_0 `values` in `isa`'s [`q8_layout`] and
/// `scales [d_out, d_in / 32]`, `x` rounded here to `bits` ([`crate::round_activations`],
/// compiled for the kernel's instructions). Parallel over groups of weight rows; each group's
/// values are read once per tile of tokens.
///
/// # Panics
/// If the CPU lacks the instructions ([`DotIsa::available`]) or the lengths do not match the
/// shape.
#[allow(clippy::too_many_arguments)]
pub fn q8_matmul(
    isa: DotIsa,
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    // SAFETY: i8 and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
    match (isa, bits) {
        (DotIsa::Avx512Vnni, ActivationBits::Eight) => {
            matmul::<avx512::Kernel, Q8, i8>(x, n, bytes, Scales::Blocks(scales), d_out, d_in)
        }
        (DotIsa::Avx512Vnni, ActivationBits::Sixteen) => {
            matmul::<avx512::Kernel, Q8, i16>(x, n, bytes, Scales::Blocks(scales), d_out, d_in)
        }
        (DotIsa::Avx2, ActivationBits::Eight) => {
            matmul::<avx2::Kernel, Q8, i8>(x, n, bytes, Scales::Blocks(scales), d_out, d_in)
        }
        (DotIsa::Avx2, ActivationBits::Sixteen) => {
            matmul::<avx2::Kernel, Q8, i16>(x, n, bytes, Scales::Blocks(scales), d_out, d_in)
        }
    }
}

/// [`q8_matmul`] for Q4_0: `W` as packed bytes `[d_out, d_in / 2]` in `isa`'s [`q4_layout`],
/// `x` rounded to [`Q4_ACTIVATION_BITS`] (8).
///
/// # Panics
/// As [`q8_matmul`].
pub fn q4_matmul(
    isa: DotIsa,
    x: &[f32],
    n: usize,
    packed: &[u8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    const { assert!(matches!(Q4_ACTIVATION_BITS, ActivationBits::Eight)) };
    match isa {
        DotIsa::Avx512Vnni => matmul::<avx512::Kernel, Q4, i8>(x, n, packed, Scales::Blocks(scales), d_out, d_in),
        DotIsa::Avx2 => matmul::<avx2::Kernel, Q4, i8>(x, n, packed, Scales::Blocks(scales), d_out, d_in),
    }
}

/// [`q4_matmul`] for Q4_K (`crate::q4k_matmul`): the nibbles in `isa`'s [`q4_layout`] stand for
/// `d · sc · q - dmin · m`, with `supers [d_out, d_in / 256, 2]` each super-block's `(d, dmin)`
/// and `subs [d_out, d_in / 32, 2]` each block's `(sc, m)`.
///
/// # Panics
/// As [`q8_matmul`].
#[allow(clippy::too_many_arguments)]
pub fn q4k_matmul(
    isa: DotIsa,
    x: &[f32],
    n: usize,
    packed: &[u8],
    supers: &[f16],
    subs: &[u8],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    let scales = Scales::SuperBlocks { supers, subs };
    match isa {
        DotIsa::Avx512Vnni => matmul::<avx512::Kernel, Q4K, i8>(x, n, packed, scales, d_out, d_in),
        DotIsa::Avx2 => matmul::<avx2::Kernel, Q4K, i8>(x, n, packed, scales, d_out, d_in),
    }
}

/// [`q8_matmul`] for Q5_K (`crate::q5k_matmul`): the values `q` (`0..=31`) as i8 in `isa`'s
/// [`q8_layout`] stand for `d · sc · q - dmin · m`, with `supers` and `subs` as
/// [`q4k_matmul`]'s; `x` rounded to [`Q4_ACTIVATION_BITS`] (8).
///
/// # Panics
/// As [`q8_matmul`].
#[allow(clippy::too_many_arguments)]
pub fn q5k_matmul(
    isa: DotIsa,
    x: &[f32],
    n: usize,
    values: &[i8],
    supers: &[f16],
    subs: &[u8],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    const { assert!(matches!(Q4_ACTIVATION_BITS, ActivationBits::Eight)) };
    // SAFETY: i8 and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
    let scales = Scales::SuperBlocks { supers, subs };
    match isa {
        DotIsa::Avx512Vnni => matmul::<avx512::Kernel, Q5K, i8>(x, n, bytes, scales, d_out, d_in),
        DotIsa::Avx2 => matmul::<avx2::Kernel, Q5K, i8>(x, n, bytes, scales, d_out, d_in),
    }
}

/// [`q8_matmul`] for Q6_K (`crate::q6k_matmul`): the values `q - 32` as i8 in `isa`'s
/// [`q8_layout`], `supers [d_out, d_in / 256]` each super-block's `d` and `subs [d_out, d_in /
/// 16]` each half block's `sc`, a half block's dot scaled by `d · sc`.
///
/// # Panics
/// As [`q8_matmul`].
#[allow(clippy::too_many_arguments)]
pub fn q6k_matmul(
    isa: DotIsa,
    x: &[f32],
    n: usize,
    values: &[i8],
    supers: &[f16],
    subs: &[i8],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    // SAFETY: i8 and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
    let scales = Scales::Halves { supers, subs };
    match (isa, bits) {
        (DotIsa::Avx512Vnni, ActivationBits::Eight) => {
            matmul::<avx512::Kernel, Q6K, i8>(x, n, bytes, scales, d_out, d_in)
        }
        (DotIsa::Avx512Vnni, ActivationBits::Sixteen) => {
            matmul::<avx512::Kernel, Q6K, i16>(x, n, bytes, scales, d_out, d_in)
        }
        (DotIsa::Avx2, ActivationBits::Eight) => matmul::<avx2::Kernel, Q6K, i8>(x, n, bytes, scales, d_out, d_in),
        (DotIsa::Avx2, ActivationBits::Sixteen) => matmul::<avx2::Kernel, Q6K, i16>(x, n, bytes, scales, d_out, d_in),
    }
}

/// A block format's scales, which the driver widens to f32 lanes group by group.
#[derive(Clone, Copy)]
enum Scales<'a> {
    /// One f16 scale a block of 32 (Q8_0, Q4_0): `[d_out, d_in / 32]`.
    Blocks(&'a [f16]),
    /// Q4_K's: `(d, dmin)` a super-block of 256 and a 6-bit `(sc, m)` a block of 32, the block's
    /// scale `d · sc` and min `dmin · m` (exact in f32: 11 by 6 significant bits).
    SuperBlocks { supers: &'a [f16], subs: &'a [u8] },
    /// Q6_K's: `d` a super-block of 256 and an i8 `sc` a half block of 16, the half's scale `d ·
    /// sc` (exact in f32: 11 by 8 significant bits).
    Halves { supers: &'a [f16], subs: &'a [i8] },
}

impl Scales<'_> {
    /// Whether they are those of a weight `[d_out, d_in]`.
    fn fits(&self, d_out: usize, d_in: usize) -> bool {
        match self {
            Scales::Blocks(scales) => scales.len() == d_out * (d_in / Q8_BLOCK),
            Scales::SuperBlocks { supers, subs } => {
                d_in.is_multiple_of(QK_K)
                    && supers.len() == d_out * (d_in / QK_K) * 2
                    && subs.len() == d_out * (d_in / Q8_BLOCK) * 2
            }
            Scales::Halves { supers, subs } => {
                d_in.is_multiple_of(QK_K) && supers.len() == d_out * (d_in / QK_K) && subs.len() == d_out * (d_in / 16)
            }
        }
    }

    /// The scales (and mins, for super-blocks) of rows `first..first + rows`, `[count, group]`
    /// for `count` scales a row.
    fn fill(self, group: usize, first: usize, rows: usize, count: usize, scales: &mut [f32], mins: &mut [f32]) {
        let rows = first..first + rows;
        match self {
            Scales::Blocks(all) => {
                for (r, row) in all[rows.start * count..rows.end * count].chunks_exact(count).enumerate() {
                    for (b, &d) in row.iter().enumerate() {
                        scales[b * group + r] = d.to_f32();
                    }
                }
            }
            Scales::SuperBlocks { supers, subs } => {
                const PER_SUPER: usize = QK_K / Q8_BLOCK;
                for (r, row) in rows.enumerate() {
                    let (supers, subs) = (&supers[row * count / PER_SUPER * 2..], &subs[row * count * 2..]);
                    for b in 0..count {
                        let (d, dmin) = (supers[b / PER_SUPER * 2].to_f32(), supers[b / PER_SUPER * 2 + 1].to_f32());
                        scales[b * group + r] = d * subs[2 * b] as f32;
                        mins[b * group + r] = dmin * subs[2 * b + 1] as f32;
                    }
                }
            }
            Scales::Halves { supers, subs } => {
                const PER_SUPER: usize = QK_K / 16;
                for (r, row) in rows.enumerate() {
                    let (supers, subs) = (&supers[row * count / PER_SUPER..], &subs[row * count..]);
                    for b in 0..count {
                        scales[b * group + r] = supers[b / PER_SUPER].to_f32() * subs[b] as f32;
                    }
                }
            }
        }
    }
}

/// Rounds each block of `x [n, d_in]` to `T` (its values, scale, and the sum of the values of
/// each of its `subs` parts): the activations every group of a product reads.
fn round_activations<K: Kernel, T: Rounding>(
    x: &[f32],
    n: usize,
    d_in: usize,
    subs: usize,
) -> (Vec<T>, Vec<f32>, Vec<i32>) {
    let count = n * (d_in / Q8_BLOCK);
    let (mut xq, mut xs, mut sums) =
        (vec![T::default(); count * Q8_BLOCK], vec![0f32; count], vec![0i32; count * subs]);
    let rounded = xq.par_chunks_mut(Q8_BLOCK).zip(xs.par_iter_mut()).zip(sums.par_chunks_mut(subs));
    rounded.zip(x.par_chunks(Q8_BLOCK)).for_each(|(((values, scale), sums), block)| {
        // SAFETY: the callers check `K::available()`.
        let (d, sum) = unsafe { K::round_block(block, values) };
        *scale = d;
        match sums {
            [whole] => *whole = sum,
            parts => {
                for (part, values) in parts.iter_mut().zip(values.chunks_exact(Q8_BLOCK / subs)) {
                    *part = values.iter().map(|&v| v.into()).sum();
                }
            }
        }
    });
    (xq, xs, sums)
}

fn matmul<K: Kernel, F: Format, T: Rounding>(
    x: &[f32],
    n: usize,
    weights: &[u8],
    scales: Scales,
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    assert!(K::available(), "integer_dot::matmul: this CPU does not run the kernel");
    let blocks = d_in / Q8_BLOCK;
    let row_bytes = d_in / 8 * F::PAIR_BYTES;
    assert!(
        d_in.is_multiple_of(Q8_BLOCK)
            && x.len() == n * d_in
            && weights.len() == d_out * row_bytes
            && scales.fits(d_out, d_in)
            && matches!(scales, Scales::SuperBlocks { .. }) == F::MINS
            && matches!(scales, Scales::Halves { .. }) == (F::SUBS == 2),
        "integer_dot::matmul: lengths do not match [{n}, {d_in}] x [{d_out}, {d_in}]"
    );
    if n == 0 || d_out == 0 || d_in == 0 {
        return vec![0f32; n * d_out];
    }
    // Not zeroed first: the tiles store every value, and zeroing is a serial pass (and the page
    // faults) on the calling thread, 7 % of its time in a decider-2b decision.
    let mut out = Vec::<f32>::with_capacity(n * d_out);
    let (values, xs, sums) = round_activations::<K, T>(x, n, d_in, F::SUBS);
    let activations = Activations { values: &values, scales: &xs, sums: &sums, subs: F::SUBS, blocks };
    let out_ptr = OutPtr::new(&mut out);
    // Tokens in passes whose activations stay in the cache while every group reads them: read
    // for each group, all of 16 batched decisions' down_proj inputs (24 MB) and the weight
    // outgrew the L3 cache. The weights, read once a pass, are the smaller stream.
    let pass = pass_tokens::<K, T>(d_in);
    for pass_start in (0..n).step_by(pass) {
        let pass_end = n.min(pass_start + pass);
        weights.par_chunks(K::GROUP * row_bytes).enumerate().for_each(|(group, weights)| {
            let rows = weights.len() / row_bytes;
            let first = group * K::GROUP;
            // The group's scales (and mins) in f32 block by block, a lane each (zero past the last
            // row).
            let mut group_scales = vec![0f32; blocks * F::SUBS * K::GROUP];
            let mut group_mins = vec![0f32; if F::MINS { blocks * K::GROUP } else { 0 }];
            scales.fill(K::GROUP, first, rows, blocks * F::SUBS, &mut group_scales, &mut group_mins);
            let group = Group { weights, rows, full: rows == K::GROUP, scales: &group_scales, mins: &group_mins };
            let mut token = pass_start;
            while token < pass_end {
                let tokens = (pass_end - token).min(K::TILE / T::REGISTERS);
                // SAFETY: `K::available()` was checked above. The tile writes outputs `first..first
                // + rows` of its tokens' rows of `out [n, d_out]`: in bounds, and no other task
                // writes these columns.
                unsafe {
                    let out = out_ptr.at(token * d_out + first);
                    match tokens {
                        8 => T::tile::<K, F, 8>(&group, &activations, token, out, d_out),
                        7 => T::tile::<K, F, 7>(&group, &activations, token, out, d_out),
                        6 => T::tile::<K, F, 6>(&group, &activations, token, out, d_out),
                        5 => T::tile::<K, F, 5>(&group, &activations, token, out, d_out),
                        4 => T::tile::<K, F, 4>(&group, &activations, token, out, d_out),
                        3 => T::tile::<K, F, 3>(&group, &activations, token, out, d_out),
                        2 => T::tile::<K, F, 2>(&group, &activations, token, out, d_out),
                        _ => T::tile::<K, F, 1>(&group, &activations, token, out, d_out),
                    }
                }
                token += tokens;
            }
        });
    }
    // SAFETY: the tiles stored all `n × d_out` values: in each pass the groups cover the
    // `d_out` columns, and the passes cover the `n` tokens.
    unsafe { out.set_len(n * d_out) };
    out
}

/// Tokens of one pass of [`matmul`]: as many whole tiles as [`PASS_BYTES`] of rounded
/// activations hold, at least one tile.
fn pass_tokens<K: Kernel, T: Rounding>(d_in: usize) -> usize {
    let tile = K::TILE / T::REGISTERS;
    (PASS_BYTES / (d_in * size_of::<T>()) / tile).max(1) * tile
}

/// Rounded activations a pass of [`matmul`] reads: with a 12 MiB weight (decider-2b's
/// down_proj) they stay in a 16 MiB L3 cache. Measured at 2048 tokens, 6144 -> 2048, AVX-512
/// host with 32 MiB L3 (`cargo bench -p decider-ops --bench ops -- Avx512Vnni`): 12 % faster than
/// one pass; 2 and 8 MiB within 2 % of this; 256 and 512 KiB (an L2 cache) slower than one pass.
pub const PASS_BYTES: usize = 4 << 20;
