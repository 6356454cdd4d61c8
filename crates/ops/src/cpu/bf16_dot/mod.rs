//! The bf16 matmul as a bf16 dot on x86-64: AVX-512 BF16's `vdpbf16ps` multiplies 32 pairs of
//! bf16 values exactly and adds each two neighbours' products into one of 16 f32 lanes, twice
//! the multiply-adds of an f32 FMA. Intel Xeon since Cooper Lake and AMD since Zen 4 have it.
//!
//! The weights are read as the checkpoint stores them, row-major bf16: no layout, so a token
//! table and candle's bf16 tensors take the kernel as they are. The activations are rounded to
//! bf16 once a product ([`crate::round_to_bf16`]), the one place the product is not the f32
//! path's; the sums stay f32.
//!
//! The tile is llamafile's tinyBLAS form (`C = Aᵀ B`, both operands along `k`), which its
//! authors found fastest on Zen 4 for bf16: [`avx512::ROWS`] weight rows × up to
//! [`avx512::TOKENS`] tokens, one register of 16 partial sums an output, each step reading 32
//! inputs of every row and token; an output's 16 lanes are added once, at the end.

use rayon::prelude::*;

mod avx512;

/// A bf16-dot kernel, by the instructions it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Isa {
    /// AVX-512 BF16 (with AVX-512BW and VL for the masked tails).
    Avx512Bf16,
}

impl Bf16Isa {
    /// Every kernel, fastest first.
    pub const ALL: [Bf16Isa; 1] = [Bf16Isa::Avx512Bf16];

    /// The fastest this CPU runs, if any.
    pub fn best() -> Option<Bf16Isa> {
        Self::ALL.into_iter().find(|isa| isa.available())
    }

    /// Whether this CPU runs it (checked once by the standard library, then cached).
    pub fn available(self) -> bool {
        match self {
            Bf16Isa::Avx512Bf16 => avx512::available(),
        }
    }
}

/// `round_bf16(x) [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` given as bf16 patterns in
/// row order. Parallel over panels of weight rows small enough to stay in a core's L2 cache
/// while every token reads them.
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
    // SAFETY: the CPU runs the kernel (asserted above).
    let x = unsafe { avx512::round(x) };
    // Not zeroed first: the tiles store every value.
    let mut out = Vec::<f32>::with_capacity(n * d_out);
    let out_ptr = OutPtr(out.as_mut_ptr());
    let panel = panel_rows(d_out, d_in);
    bits.par_chunks(panel * d_in).enumerate().for_each(|(p, weights)| {
        let (first, rows) = (p * panel, weights.len() / d_in);
        for token in (0..n).step_by(avx512::TOKENS) {
            let tokens = avx512::TOKENS.min(n - token);
            for row in (0..rows).step_by(avx512::ROWS) {
                let tile = avx512::Tile {
                    weights: &weights[row * d_in..],
                    rows: avx512::ROWS.min(rows - row),
                    x: &x[token * d_in..],
                    tokens,
                    d_in,
                };
                // SAFETY: the CPU runs the kernel. The tile writes outputs `first + row..` (its
                // `rows` columns) of its tokens' rows of `out [n, d_out]`: in bounds, and no other
                // task writes these columns.
                unsafe { tile.run(out_ptr.at(token * d_out + first + row), d_out) };
            }
        }
    });
    // SAFETY: the panels cover the `d_out` columns and each covers the `n` tokens.
    unsafe { out.set_len(n * d_out) };
    out
}

/// Weight rows a task multiplies with every token: [`PANEL_BYTES`] of them, a whole number of
/// tiles, fewer where that leaves a thread under four tasks.
fn panel_rows(d_out: usize, d_in: usize) -> usize {
    let fits = (PANEL_BYTES / (2 * d_in)).max(1);
    let shared = d_out.div_ceil(4 * rayon::current_num_threads());
    fits.min(shared).next_multiple_of(avx512::ROWS)
}

/// The bytes of weights a task reads for every tile of tokens: at most a quarter of a Zen 4
/// core's 1 MiB L2 cache, so that the activations' tiles fit beside them.
const PANEL_BYTES: usize = 256 << 10;

/// The output's start, shared by the tasks, which write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: see `bf16_matmul`: each task writes only its own panel's columns.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `offset` is within the output.
    unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's.
        unsafe { self.0.add(offset) }
    }
}
