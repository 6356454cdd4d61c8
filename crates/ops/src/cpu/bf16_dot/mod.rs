//! The bf16 matmul on x86-64, two ways to the same products (bf16 weights as stored, times
//! activations rounded to bf16, summed in f32):
//! - [`avx512`]: AVX-512 BF16's `vdpbf16ps` multiplies 32 pairs of bf16 values exactly and adds
//!   each two neighbours' products into one of 16 f32 lanes. AMD's Zen 4 runs one a cycle, twice
//!   the multiply-adds of its f32 FMAs.
//! - [`fma`]: the weights widened to f32 a panel at a time, then f32 FMAs. Intel's Sapphire and
//!   Emerald Rapids run two FMAs a cycle but one `vdpbf16ps` every second cycle (measured on an
//!   Emerald Rapids VM: 1.37 G `vdpbf16ps`/s against 5.7 G FMAs/s on one core), so there the FMAs
//!   do twice the multiply-adds; it also serves AVX-512 CPUs without BF16.
//!
//! The weights are read as the checkpoint stores them, row-major bf16: no layout, so a token
//! table and candle's bf16 tensors take the kernel as they are. The activations are rounded to
//! bf16 once a product ([`crate::round_to_bf16`]), the one place the product is not the f32
//! path's; the sums stay f32.
//!
//! The tiles are llamafile's tinyBLAS form (`C = Aᵀ B`, both operands along `k`), which its
//! authors found fastest on Zen 4 for bf16: 4 weight rows × up to 6 tokens, one register of 16
//! partial sums an output, each step reading a register of inputs of every row and token; an
//! output's 16 lanes are added once, at the end of a block of inputs.

use std::arch::x86_64::*;

use rayon::prelude::*;

use crate::cpu::out_ptr::OutPtr;
use crate::instructions::{Instructions, instruction_ceiling};

mod avx512;
mod fma;
mod tile;

use tile::{ROWS, TOKENS};

/// A bf16 matmul kernel, by the instructions it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Isa {
    /// AVX-512 BF16's `vdpbf16ps` (with AVX-512BW and VL for the masked tails).
    Avx512Bf16,
    /// AVX-512F FMAs on weights widened to f32 (with AVX-512VL for the masked stores).
    Avx512Fma,
}

impl Bf16Isa {
    /// Every kernel.
    pub const ALL: [Bf16Isa; 2] = [Bf16Isa::Avx512Bf16, Bf16Isa::Avx512Fma];

    /// The fastest this CPU runs for `n` tokens under the process's [`Instructions`] ceiling, if
    /// any: the `vdpbf16ps` dot, but on Intel's CPUs from [`FMA_TOKENS`] tokens the FMAs, which
    /// do twice its multiply-adds there.
    pub fn best(n: usize) -> Option<Bf16Isa> {
        let ceiling = instruction_ceiling();
        let mut order = Self::ALL;
        if n >= FMA_TOKENS && is_intel() {
            order.reverse();
        }
        order.into_iter().find(|isa| isa.family() <= ceiling && isa.available())
    }

    /// What [`Bf16Isa::best`] picks on this CPU, in words.
    pub fn about_best() -> Option<String> {
        let (few, many) = (Self::best(1)?, Self::best(FMA_TOKENS)?);
        Some(match few == many {
            true => few.about().to_string(),
            false => format!("{} from {FMA_TOKENS} tokens, else {}", many.about(), few.about()),
        })
    }

    /// The family it belongs to.
    pub fn family(self) -> Instructions {
        match self {
            Bf16Isa::Avx512Bf16 | Bf16Isa::Avx512Fma => Instructions::Avx512,
        }
    }

    /// Whether this CPU runs it (checked once by the standard library, then cached).
    pub fn available(self) -> bool {
        match self {
            Bf16Isa::Avx512Bf16 => avx512::available(),
            Bf16Isa::Avx512Fma => fma::available(),
        }
    }

    /// What it is, in words.
    pub fn about(self) -> &'static str {
        match self {
            Bf16Isa::Avx512Bf16 => "AVX-512 BF16 dot (vdpbf16ps)",
            Bf16Isa::Avx512Fma => "AVX-512 FMAs on panels widened to f32",
        }
    }
}

/// Tokens from which the FMA kernel is faster on Intel's CPUs: its widening of the weights
/// (about 1.5 ms for decider-2b's `up_proj` on two Emerald Rapids cores) costs what it saves on
/// about 60 tokens (`cargo bench -p decider-ops --bench ops -- bf16_matmul`: at 16 tokens 4.0 ms
/// against the dot's 2.6, at 128 tokens 15–21 ms against 19.5–22, at 512 tokens 54–68 ms
/// against 77–81).
pub const FMA_TOKENS: usize = 64;

/// Whether the CPU's vendor is Intel (CPUID leaf 0: "GenuineIntel"), asked once: CPUID traps to
/// the hypervisor in a virtual machine.
fn is_intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        let id = __cpuid(0);
        [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat() == b"GenuineIntel"
    })
}

/// `round_bf16(x) [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` given as bf16 patterns in
/// row order. Parallel over panels of weight rows ([`PANEL_BYTES`], [`FMA_PANEL_ROWS`]) that
/// every token reads; with [`Bf16Isa::Avx512Fma`] in blocks of inputs ([`FMA_BLOCK_DEPTH`])
/// whose activations stay in L1.
///
/// # Panics
/// If the CPU lacks the instructions ([`Bf16Isa::available`]) or the lengths do not match the
/// shape.
pub fn bf16_matmul(isa: Bf16Isa, x: &[f32], n: usize, bits: &[u16], d_out: usize, d_in: usize) -> Vec<f32> {
    assert!(isa.available(), "bf16_matmul: this CPU does not run {isa:?}");
    assert!(
        x.len() == n * d_in && bits.len() == d_out * d_in,
        "bf16_matmul: lengths do not match [{n}, {d_in}] x [{d_out}, {d_in}]"
    );
    if n == 0 || d_out == 0 || d_in == 0 {
        return vec![0f32; n * d_out];
    }
    // Not zeroed first: the tiles store every value.
    let mut out = Vec::<f32>::with_capacity(n * d_out);
    let out_ptr = OutPtr::new(&mut out);
    match isa {
        Bf16Isa::Avx512Bf16 => {
            // SAFETY: the CPU runs the kernel (asserted above).
            let x = unsafe { avx512::round(x) };
            let panel = panel_rows(d_out, (PANEL_BYTES / (2 * d_in)).max(1));
            bits.par_chunks(panel * d_in).enumerate().for_each(|(p, weights)| {
                let (first, rows) = (p * panel, weights.len() / d_in);
                for token in (0..n).step_by(TOKENS) {
                    for row in (0..rows).step_by(ROWS) {
                        let tile = avx512::Tile {
                            weights: &weights[row * d_in..],
                            rows: ROWS.min(rows - row),
                            x: &x[token * d_in..],
                            tokens: TOKENS.min(n - token),
                            d_in,
                        };
                        // SAFETY: the CPU runs the kernel. The tile writes outputs `first + row..`
                        // (its `rows` columns) of its tokens' rows of `out [n, d_out]`: in bounds,
                        // and no other task writes these columns.
                        unsafe { tile.run(out_ptr.at(token * d_out + first + row), d_out) };
                    }
                }
            });
        }
        Bf16Isa::Avx512Fma => {
            // SAFETY: the CPU runs the kernel (asserted above).
            let x = unsafe { fma::round(x) };
            let depth = block_depth(d_in, FMA_BLOCK_DEPTH, fma::STEP);
            let quad = fma::quad_len(d_in);
            let panel = panel_rows(d_out, FMA_PANEL_ROWS);
            bits.par_chunks(panel * d_in).enumerate().for_each(|(p, bits)| {
                let (first, rows) = (p * panel, bits.len() / d_in);
                // SAFETY: as above.
                let weights = unsafe { fma::widen_panel(bits, d_in) };
                for_each_tile(n, rows, d_in, depth, |token, tokens, k, depth, row| {
                    let tile = fma::Tile {
                        weights: &weights[row / ROWS * quad + k * ROWS..],
                        rows: ROWS.min(rows - row),
                        x: &x[token * d_in + k..],
                        tokens,
                        depth,
                        stride: d_in,
                    };
                    // SAFETY: the CPU runs the kernel; see `for_each_tile` for `out`.
                    unsafe { tile.run(out_ptr.at(token * d_out + first + row), d_out, k > 0) };
                });
            });
        }
    }
    // SAFETY: the panels cover the `d_out` columns and each covers the `n` tokens and inputs.
    unsafe { out.set_len(n * d_out) };
    out
}

/// Calls `tile(token, tokens, k, depth, row)` for each of the FMA kernel's tiles of a panel of
/// `rows` weight rows: tiles of [`TOKENS`] tokens outermost, then blocks of `depth` inputs, then
/// quads of rows. Each tile writes (the first block, `k == 0`) or adds to (the others) its
/// outputs: the panel's columns `row..row + 4` of its tokens' rows, which no other task writes.
/// (The other order, blocks outermost so that a block of the panel stays in L2 while every token
/// reads it, measured the same and was not kept.)
fn for_each_tile(
    n: usize,
    rows: usize,
    d_in: usize,
    depth: usize,
    mut tile: impl FnMut(usize, usize, usize, usize, usize),
) {
    for token in (0..n).step_by(TOKENS) {
        for k in (0..d_in).step_by(depth) {
            for row in (0..rows).step_by(ROWS) {
                tile(token, TOKENS.min(n - token), k, depth.min(d_in - k), row);
            }
        }
    }
}

/// `d_in` in as few even blocks of at most `most` inputs as it takes, a whole number of `step`s
/// each.
fn block_depth(d_in: usize, most: usize, step: usize) -> usize {
    d_in.div_ceil(d_in.div_ceil(most)).next_multiple_of(step)
}

/// Inputs of a block of the FMA kernel: a tile's 6 tokens of them in f32 (24 KiB) stay in a
/// core's L1 cache while its row quads stream past (512 and 2,048 were slower on Emerald Rapids).
const FMA_BLOCK_DEPTH: usize = 1024;

/// Weight rows a task multiplies with every token: `most`, a whole number of tiles, fewer where
/// that leaves a thread under four tasks.
fn panel_rows(d_out: usize, most: usize) -> usize {
    let shared = d_out.div_ceil(4 * rayon::current_num_threads());
    most.min(shared).next_multiple_of(ROWS)
}

/// Weight rows of the FMA kernel's panels (1.5 MiB in f32 at `down_proj`'s 6,144 inputs): each
/// panel reads all the activations (12 MiB in f32 for 512 tokens of `down_proj`, from L3), so
/// fewer, taller panels read less. On an Emerald Rapids VM (2 MiB L2), 512 tokens of
/// `down_proj`: 64 rows took 66–71 ms where 24 rows (256 KiB of bf16) took 76.
const FMA_PANEL_ROWS: usize = 64;

/// The bytes of bf16 weights a task of the bf16 dot reads for every tile of tokens: at most a
/// quarter of a Zen 4 core's 1 MiB L2 cache, so that the activations' tiles fit beside them.
const PANEL_BYTES: usize = 256 << 10;
