//! What the driver ([`super`]) and the kernels ([`super::avx512`], [`super::avx2`]) share: the
//! [`Kernel`] trait each kernel implements, the weight [`Format`]s and activation integers
//! ([`Rounding`]) it is compiled for, and the [`Group`] of weight rows and rounded
//! [`Activations`] a tile reads. Apart from the driver, so that the kernels import it without
//! reaching back into the module that calls them.

use crate::q8_matmul::{ActivationInt, round_activation_block};
use crate::{ActivationBits, Q8_BLOCK};

/// A block format's weight bytes, as the kernels read them: each row's bytes for 8 inputs (two
/// `k` steps).
pub(super) trait Format {
    /// Two 4-bit values a byte (Q4_0: `q = w + 8`, the first step in the low nibbles), else one
    /// signed byte a value, step after step (Q8_0).
    const NIBBLES: bool;
    /// Whether each block also has a min `m` (Q4_K, Q5_K: `w = s · q - m`, `q` unbiased), where
    /// Q4_0's nibbles stand for `s · (q - 8)`.
    const MINS: bool = false;
    /// Scales a block of 32 inputs has: 2 for Q6_K's blocks of 16, whose dots are scaled a half
    /// block at a time.
    const SUBS: usize = 1;
    /// Bytes a row holds for 8 inputs.
    const PAIR_BYTES: usize = if Self::NIBBLES { 4 } else { 8 };
}

/// Q8_0.
pub(super) struct Q8;
impl Format for Q8 {
    const NIBBLES: bool = false;
}

/// Q4_0.
pub(super) struct Q4;
impl Format for Q4 {
    const NIBBLES: bool = true;
}

/// Q4_K: Q4_0's nibbles, with a scale and a min a block.
pub(super) struct Q4K;
impl Format for Q4K {
    const NIBBLES: bool = true;
    const MINS: bool = true;
}

/// Q5_K: Q8_0's bytes (the 5-bit `q`), with Q4_K's scale and min a block.
pub(super) struct Q5K;
impl Format for Q5K {
    const NIBBLES: bool = false;
    const MINS: bool = true;
}

/// Q6_K: Q8_0's bytes (`q - 32`), with a scale a half block.
pub(super) struct Q6K;
impl Format for Q6K {
    const NIBBLES: bool = false;
    const SUBS: usize = 2;
}

/// The instructions one kernel is compiled for: its group and tile sizes, and its tiles.
pub(super) trait Kernel {
    /// Weight rows per group: the i32 lanes of a register.
    const GROUP: usize;
    /// Tokens per tile with 8-bit activations (half as many with 16-bit ones, which take two i32
    /// registers a token): the accumulators (an f32 register and one or two i32 ones per token)
    /// and the step's operands fit in the registers.
    const TILE: usize;

    /// Whether this CPU runs the kernel.
    fn available() -> bool;

    /// One block of activations rounded to `T` (values, scale, sum of values), compiled for the
    /// kernel's instructions (where the rounding vectorises).
    ///
    /// # Safety
    /// The CPU runs the kernel ([`Kernel::available`]).
    unsafe fn round_block<T: Rounding>(block: &[f32], values: &mut [T]) -> (f32, i32);

    /// Outputs of one group for `C` tokens from `token`, 8-bit activations, written to `out + j
    /// * d_out` for token `j`.
    ///
    /// # Safety
    /// The CPU runs the kernel; tokens `token..token + C` are in `x`; `out` plus each token's
    /// row holds the group's columns.
    unsafe fn tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i8>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    );

    /// [`Kernel::tile`] for byte weights (Q8_0, Q6_K) and 16-bit activations.
    ///
    /// # Safety
    /// As [`Kernel::tile`].
    unsafe fn wide_tile<F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i16>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    );
}

/// The activations' integer (8 or 16 bits), and the tile that reads it.
pub(super) trait Rounding: ActivationInt {
    /// What [`crate::ActivationBits`] calls it.
    const BITS: ActivationBits;
    /// The i32 registers a token's dot takes in a tile (a tile holds `TILE / REGISTERS` tokens).
    const REGISTERS: usize;

    /// `K`'s tile for these activations and weights in format `F`, for `C` tokens.
    ///
    /// # Safety
    /// As [`Kernel::tile`].
    unsafe fn tile<K: Kernel, F: Format, const C: usize>(
        group: &Group,
        x: &Activations<Self>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    );
}

impl Rounding for i8 {
    const BITS: ActivationBits = ActivationBits::Eight;
    const REGISTERS: usize = 1;

    unsafe fn tile<K: Kernel, F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i8>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        // SAFETY: the caller's.
        unsafe { K::tile::<F, C>(group, x, token, out, d_out) }
    }
}

impl Rounding for i16 {
    const BITS: ActivationBits = ActivationBits::Sixteen;
    const REGISTERS: usize = 2;

    unsafe fn tile<K: Kernel, F: Format, const C: usize>(
        group: &Group,
        x: &Activations<i16>,
        token: usize,
        out: *mut f32,
        d_out: usize,
    ) {
        assert!(!F::NIBBLES, "integer_dot: 16-bit activations are for byte weights (Q8_0, Q6_K)");
        // SAFETY: the caller's.
        unsafe { K::wide_tile::<F, C>(group, x, token, out, d_out) }
    }
}

/// The rounding of [`Kernel::round_block`], the same for every kernel: always inlined, so that
/// each compiles it for its own instructions (called, it ran for the baseline x86-64, a libm
/// `rintf` call a value).
#[inline(always)]
pub(super) fn round_block<T: Rounding>(block: &[f32], values: &mut [T]) -> (f32, i32) {
    let scale = round_activation_block(block, T::BITS.max_value(), values);
    (scale, values.iter().map(|&v| v.into()).sum::<i32>())
}

/// One group of up to [`Kernel::GROUP`] weight rows.
pub(super) struct Group<'a> {
    /// The rows' bytes in their format's layout.
    pub(super) weights: &'a [u8],
    pub(super) rows: usize,
    /// Whether the group has all its rows (only a weight's last group may have fewer).
    pub(super) full: bool,
    /// `[blocks × SUBS, GROUP]`: block `b`'s scale of each row (half `h`'s at `b × SUBS + h`,
    /// [`Format::SUBS`]).
    pub(super) scales: &'a [f32],
    /// `[blocks, GROUP]`: block `b`'s min of each row, for a format with mins ([`Format::MINS`]);
    /// else empty.
    pub(super) mins: &'a [f32],
}

/// The activations `[n, d_in]` rounded block by block to `T` (i8 or i16): for each token's
/// block, its 32 values, scale and value sum.
pub(super) struct Activations<'a, T> {
    /// `[n, blocks, 32]`.
    pub(super) values: &'a [T],
    /// `[n, blocks]`.
    pub(super) scales: &'a [f32],
    /// `[n, blocks, subs]`: each block's (or half block's, for a format of [`Format::SUBS`] 2)
    /// sum of values, what a kernel that reads the weights biased subtracts.
    pub(super) sums: &'a [i32],
    /// Sums a block: the format's [`Format::SUBS`].
    pub(super) subs: usize,
    pub(super) blocks: usize,
}

impl<T> Activations<'_, T> {
    /// Token `token`'s block `b`: its index in `scales` (× 32 in `values`).
    #[inline(always)]
    pub(super) fn at(&self, token: usize, b: usize) -> usize {
        token * self.blocks + b
    }

    /// The sum of token `token`'s block `b` (of its half `h`, in a format of two halves).
    #[inline(always)]
    pub(super) fn sum(&self, token: usize, b: usize, h: usize) -> i32 {
        self.sums[self.at(token, b) * self.subs + h]
    }

    /// Where the 4 values of step `step` (inputs `4 step..4 step + 4`) of token `token`'s block
    /// `b` start: read as one integer (i32 for 8 bits, i64 for 16) and broadcast straight from
    /// memory, an operand of the product (read into a register first, they cost an instruction
    /// each, and the AVX-512 kernel ran at half the speed).
    ///
    /// # Safety
    /// `token`, `b` and `step < 8` are within the activations.
    #[inline(always)]
    pub(super) unsafe fn four(&self, token: usize, b: usize, step: usize) -> *const T {
        // SAFETY: the caller's.
        unsafe { self.values.as_ptr().add(self.at(token, b) * Q8_BLOCK + step * 4) }
    }
}
