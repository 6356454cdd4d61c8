//! How a backend holds the narrow ints of the block formats (Q8_0 values, Q4_0's packed bytes,
//! the scales' f16 bits) in burn's int tensors, which not every backend has in 8 or 16 bits.
//!
//! Every form takes the format's own size: 1 byte a Q8_0 value, 1 a Q4_0 byte (two values), 2 a
//! scale. Only the last dimension of a tensor changes with the form ([`BlockStorage::width`]), so
//! a weight `[..., out, in]` keeps its leading dimensions. Each tensor is made by one function
//! ([`crate::q8_rows`], [`crate::q4_rows`], [`crate::block_scales`]) and read back as exact floats by
//! another ([`crate::q8_values_f32`], [`crate::q4_bytes_f32`], [`crate::block_scales_f32`]), in
//! tensor ops that every backend has.

use burn::tensor::{DType, Element, ElementConversion, Int, Tensor, TensorData, backend::Backend};

/// The narrow ints of the block formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockInts {
    /// Q8_0 values, in `-127..=127`.
    Q8Values,
    /// Q4_0's bytes, two values each.
    Q4Bytes,
    /// The f16 bits of the block scales.
    ScaleBits,
}

impl BlockInts {
    /// The bytes of one.
    pub const fn bytes(self) -> usize {
        match self {
            BlockInts::Q8Values | BlockInts::Q4Bytes => 1,
            BlockInts::ScaleBits => 2,
        }
    }
}

/// How a backend holds [`BlockInts`] ([`crate::Q8Matmul::block_storage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockStorage {
    /// Each in an int of its own width: values in i8, bytes in u8, scale bits in u16 (ndarray).
    OwnWidth,
    /// As bytes, one to a u8: a Q8_0 value plus 128 (its two's complement byte with the top bit
    /// flipped), a scale's bits as two bytes, low first (candle, which stores no i8 or u16).
    Bytes,
    /// Those bytes four to an int of the backend's own int dtype, the first in the lowest 8 bits,
    /// each row padded with zero bytes to whole ints (wgpu: WGSL has no 8- or 16-bit ints, and
    /// burn-wgpu 0.21 reads an i8 tensor wrongly). Read back with shifts and masks.
    Words,
}

/// Bytes to an int in [`BlockStorage::Words`].
const WORD_BYTES: usize = 4;

impl BlockStorage {
    /// The dtype `ints` are held in on backend `B`.
    pub fn dtype<B: Backend>(self, ints: BlockInts) -> DType {
        match (self, ints) {
            (BlockStorage::OwnWidth, BlockInts::Q8Values) => DType::I8,
            (BlockStorage::OwnWidth, BlockInts::Q4Bytes) | (BlockStorage::Bytes, _) => DType::U8,
            (BlockStorage::OwnWidth, BlockInts::ScaleBits) => DType::U16,
            (BlockStorage::Words, _) => <B::IntElem as Element>::dtype(),
        }
    }

    /// The last dimension of a tensor holding rows of `count` of `ints`.
    pub const fn width(self, ints: BlockInts, count: usize) -> usize {
        match self {
            BlockStorage::OwnWidth => count,
            BlockStorage::Bytes => count * ints.bytes(),
            BlockStorage::Words => (count * ints.bytes()).div_ceil(WORD_BYTES),
        }
    }

    /// The shape of a tensor holding `[..., count]` of `ints`.
    pub fn shape<const D: usize>(self, ints: BlockInts, mut dims: [usize; D]) -> [usize; D] {
        dims[D - 1] = self.width(ints, dims[D - 1]);
        dims
    }

    /// The shape `[..., count]` of the `ints` a tensor of shape `held` holds: the inverse of
    /// [`BlockStorage::shape`] for ints whose rows fill whole ints of the storage (Q8_0 values and
    /// Q4_0 bytes, whose rows are whole blocks of 32 and 16 bytes; not scales, whose rows may be
    /// padded).
    pub fn ints_shape<const D: usize>(self, ints: BlockInts, mut held: [usize; D]) -> [usize; D] {
        let width = held[D - 1];
        held[D - 1] = match self {
            BlockStorage::OwnWidth => width,
            BlockStorage::Bytes => width / ints.bytes(),
            BlockStorage::Words => width * WORD_BYTES / ints.bytes(),
        };
        held
    }
}

/// Rows of bytes `[..., count]` (row-major) as [`BlockStorage::Words`] of backend `B`.
pub(crate) fn words<B: Backend, const D: usize>(
    bytes: Vec<u8>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let count = dims[D - 1];
    let width = count.div_ceil(WORD_BYTES);
    let words: Vec<i32> = match count {
        0 => Vec::new(),
        _ => bytes
            .chunks(count)
            .flat_map(|row| {
                row.chunks(WORD_BYTES).map(|word| {
                    let mut le = [0u8; WORD_BYTES];
                    le[..word.len()].copy_from_slice(word);
                    i32::from_le_bytes(le)
                })
            })
            .collect(),
    };
    let mut shape = dims;
    shape[D - 1] = width;
    Tensor::from_data(TensorData::new(words, shape), (device, <B::IntElem as Element>::dtype()))
}

/// The bytes a [`BlockStorage::Bytes`] or [`BlockStorage::Words`] tensor holds, as floats (exact:
/// `0..=255`), `[..., width]` ints as `[..., bytes]`; a u8 tensor as it is.
pub(crate) fn bytes_f32<B: Backend, const D: usize>(held: Tensor<B, D, Int>, storage: BlockStorage) -> Tensor<B, D> {
    let BlockStorage::Words = storage else {
        return held.float();
    };
    let dims = held.dims();
    let width = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let flat = held.reshape([rows, width]);
    let lanes = (0..WORD_BYTES)
        .map(|k| {
            flat.clone()
                .bitwise_right_shift_scalar((8 * k as i32).elem())
                .bitwise_and_scalar(0xffi32.elem())
                .reshape([rows, width, 1])
        })
        .collect();
    let mut bytes = dims;
    bytes[D - 1] = width * WORD_BYTES;
    Tensor::cat(lanes, 2).float().reshape(bytes)
}
