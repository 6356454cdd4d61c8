//! The tensor types of GGML (llama.cpp's tensor library) that a GGUF file stores, with their
//! block layouts and their dequantization to f32, as `ggml-quants.c`'s `dequantize_row_*` computes
//! it: the same products in the same order, so every value equals llama.cpp's bit for bit (checked
//! against the `gguf` Python package's `gguf.quants`, llama.cpp's own reference port, by
//! `tests/fixtures/gguf/generate.py` and its test).
//!
//! A block holds [`GgmlType::block_values`] consecutive values of a row in
//! [`GgmlType::block_bytes`] bytes, little-endian; the layouts are in `docs/gguf.md`.

use half::f16;

/// The k-quants' super-block: 256 values (llama.cpp's `QK_K`).
pub const QK_K: usize = 256;

/// A GGML tensor type this build reads, by its GGUF type id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Bf16,
    /// 32 values: an f16 scale `d` and 32 i8 values; `x = d · q`.
    Q8_0,
    /// 32 values: an f16 scale `d` and 16 bytes of 4-bit values; `x = d · (q - 8)`.
    Q4_0,
    /// 32 values: f16 `d` and `m`, 16 bytes of 4-bit values; `x = d · q + m`.
    Q4_1,
    /// 32 values: an f16 scale `d`, 32 fifth bits, 16 bytes of 4-bit low parts; `x = d · (q - 16)`
    /// (what llama-quantize holds rows narrower than a k-quant's 256 values in).
    Q5_0,
    /// 32 values: f16 `d` and `m`, 32 fifth bits, 16 bytes of 4-bit low parts; `x = d · q + m`.
    Q5_1,
    /// 256 values in 16 sub-blocks of 16: 2-bit values, a 4-bit scale and min per sub-block, f16
    /// `d` and `dmin`; `x = d · sc · q - dmin · m`.
    Q2K,
    /// 256 values in 16 sub-blocks of 16: 3-bit values (2 low bits and a high-bit mask), 6-bit
    /// scales, an f16 `d`; `x = d · (sc - 32) · (q - 4)`.
    Q3K,
    /// 256 values in 8 sub-blocks of 32: 4-bit values, a 6-bit scale and min per sub-block, f16
    /// `d` and `dmin`; `x = d · sc · q - dmin · m`.
    Q4K,
    /// As [`GgmlType::Q4K`] with a fifth bit per value.
    Q5K,
    /// 256 values in 16 sub-blocks of 16: 6-bit values, an i8 scale per sub-block, an f16 `d`;
    /// `x = d · sc · (q - 32)`.
    Q6K,
}

impl GgmlType {
    /// Every type this build reads.
    pub const ALL: [GgmlType; 13] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Bf16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ];

    /// The type of GGUF type id `id` (`enum ggml_type` in `ggml.h`), if this build reads it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The GGUF type id.
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Bf16 => 30,
        }
    }

    /// llama.cpp's name of the type (`ggml_type_name`).
    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::Bf16 => "bf16",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q2K => "q2_K",
            GgmlType::Q3K => "q3_K",
            GgmlType::Q4K => "q4_K",
            GgmlType::Q5K => "q5_K",
            GgmlType::Q6K => "q6_K",
        }
    }

    /// The values of one block (1 for the float types).
    pub const fn block_values(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => 1,
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => 32,
            GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => QK_K,
        }
    }

    /// The bytes of one block.
    pub const fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::Bf16 => 2,
            GgmlType::Q8_0 => 2 + 32,
            GgmlType::Q4_0 => 2 + 16,
            GgmlType::Q4_1 => 2 + 2 + 16,
            GgmlType::Q5_0 => 2 + 4 + 16,
            GgmlType::Q5_1 => 2 + 2 + 4 + 16,
            GgmlType::Q2K => 16 + 64 + 2 + 2,
            GgmlType::Q3K => 32 + 64 + 12 + 2,
            GgmlType::Q4K => 2 + 2 + 12 + 128,
            GgmlType::Q5K => 2 + 2 + 12 + 32 + 128,
            GgmlType::Q6K => 128 + 64 + 16 + 2,
        }
    }

    /// The bytes of `values` values, `None` unless they are a whole number of blocks whose bytes
    /// fit in a `usize`.
    pub fn bytes_of(self, values: usize) -> Option<usize> {
        match values.is_multiple_of(self.block_values()) {
            true => (values / self.block_values()).checked_mul(self.block_bytes()),
            false => None,
        }
    }

    /// Dequantizes whole blocks: `bytes` (a multiple of [`GgmlType::block_bytes`]) into `out`
    /// (their [`GgmlType::block_values`] each).
    ///
    /// # Panics
    /// If the lengths do not match.
    pub fn dequantize(self, bytes: &[u8], out: &mut [f32]) {
        let blocks = bytes.len() / self.block_bytes();
        assert!(
            bytes.len() == blocks * self.block_bytes() && out.len() == blocks * self.block_values(),
            "{}: {} bytes and {} values are not the same whole blocks",
            self.name(),
            bytes.len(),
            out.len()
        );
        let each = bytes.chunks_exact(self.block_bytes()).zip(out.chunks_exact_mut(self.block_values()));
        match self {
            GgmlType::F32 => each.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            GgmlType::F16 => each.for_each(|(b, y)| y[0] = f16_at(b, 0)),
            // The top half of an f32's bits, exactly (a NaN's payload too, as ggml's
            // `GGML_BF16_TO_FP32`).
            GgmlType::Bf16 => {
                each.for_each(|(b, y)| y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
            }
            GgmlType::Q8_0 => each.for_each(|(b, y)| q8_0(b, y)),
            GgmlType::Q4_0 => each.for_each(|(b, y)| q4_0(b, y)),
            GgmlType::Q4_1 => each.for_each(|(b, y)| q4_1(b, y)),
            GgmlType::Q5_0 => each.for_each(|(b, y)| q5_0(b, y)),
            GgmlType::Q5_1 => each.for_each(|(b, y)| q5_1(b, y)),
            GgmlType::Q2K => each.for_each(|(b, y)| q2_k(b, y)),
            GgmlType::Q3K => each.for_each(|(b, y)| q3_k(b, y)),
            GgmlType::Q4K => each.for_each(|(b, y)| q4_k(b, y)),
            GgmlType::Q5K => each.for_each(|(b, y)| q5_k(b, y)),
            GgmlType::Q6K => each.for_each(|(b, y)| q6_k(b, y)),
        }
    }
}

/// Whole Q4_K blocks taken apart into what [`crate::q4k_matmul`] holds, the same values: the
/// nibbles in Q4_0's order within each sub-block of 32 (byte `i` holds value `i` low and `i +
/// 16` high), each block's `(d, dmin)` and each sub-block's 6-bit `(sc, m)`.
///
/// # Panics
/// If `bytes` is not whole blocks.
pub fn split_q4_k(bytes: &[u8]) -> (Vec<u8>, Vec<f16>, Vec<u8>) {
    let ty = GgmlType::Q4K;
    assert!(bytes.len().is_multiple_of(ty.block_bytes()), "q4_K: {} bytes are not whole blocks", bytes.len());
    let blocks = bytes.len() / ty.block_bytes();
    let (mut nibbles, mut supers, mut subs) =
        (Vec::with_capacity(blocks * QK_K / 2), Vec::with_capacity(2 * blocks), Vec::with_capacity(16 * blocks));
    for block in bytes.chunks_exact(ty.block_bytes()) {
        supers.push(f16::from_le_bytes([block[0], block[1]]));
        supers.push(f16::from_le_bytes([block[2], block[3]]));
        let (scales, qs) = (&block[4..16], &block[16..144]);
        for j in 0..QK_K / 32 {
            let (sc, m) = scale_min_k4(j, scales);
            subs.extend([sc, m]);
            let q = &qs[32 * (j / 2)..][..32];
            let value = |l: usize| if j % 2 == 0 { q[l] & 0x0f } else { q[l] >> 4 };
            nibbles.extend((0..16).map(|i| value(i) | (value(i + 16) << 4)));
        }
    }
    (nibbles, supers, subs)
}

/// The Q4_K blocks that [`split_q4_k`] took apart, put back together byte for byte (what a
/// quantized folder stores).
///
/// # Panics
/// If the parts are not those of whole blocks, or a scale or min does not fit in 6 bits.
pub fn join_q4_k(nibbles: &[u8], supers: &[f16], subs: &[u8]) -> Vec<u8> {
    let blocks = supers.len() / 2;
    assert!(
        supers.len() == 2 * blocks && nibbles.len() == blocks * QK_K / 2 && subs.len() == blocks * 16,
        "join_q4_k: {} nibble bytes, {} supers and {} subs are not the parts of whole blocks",
        nibbles.len(),
        supers.len(),
        subs.len()
    );
    assert!(subs.iter().all(|&s| s < 64), "join_q4_k: a scale or min above 6 bits");
    let mut bytes = vec![0u8; blocks * GgmlType::Q4K.block_bytes()];
    for (b, block) in bytes.chunks_exact_mut(GgmlType::Q4K.block_bytes()).enumerate() {
        block[0..2].copy_from_slice(&supers[2 * b].to_le_bytes());
        block[2..4].copy_from_slice(&supers[2 * b + 1].to_le_bytes());
        let (scales, qs) = block[4..].split_at_mut(12);
        let subs = &subs[16 * b..][..16];
        for j in 0..QK_K / 32 {
            let (sc, m) = (subs[2 * j], subs[2 * j + 1]);
            if j < 4 {
                scales[j] |= sc;
                scales[j + 4] |= m;
            } else {
                scales[j + 4] = (sc & 0x0f) | ((m & 0x0f) << 4);
                scales[j - 4] |= (sc >> 4) << 6;
                scales[j] |= (m >> 4) << 6;
            }
            // Sub-block j's nibbles, in Q4_0's order, back to the file's: its 32 values in the
            // low (even j) or high (odd j) nibbles of bytes 32·(j / 2)...
            let ours = &nibbles[(b * QK_K + 32 * j) / 2..][..16];
            let q = &mut qs[32 * (j / 2)..][..32];
            for i in 0..16 {
                let (low, high) = (ours[i] & 0x0f, ours[i] >> 4);
                let shift = if j % 2 == 0 { 0 } else { 4 };
                q[i] |= low << shift;
                q[i + 16] |= high << shift;
            }
        }
    }
    bytes
}

/// Whole Q5_K blocks taken apart into what [`crate::q5k_matmul`] holds, the same values: each
/// 5-bit value `q` (`0..=31`) as an i8 in row order, each block's `(d, dmin)` and each sub-block's
/// 6-bit `(sc, m)` (as [`split_q4_k`]'s).
///
/// # Panics
/// If `bytes` is not whole blocks.
pub fn split_q5_k(bytes: &[u8]) -> (Vec<i8>, Vec<f16>, Vec<u8>) {
    let ty = GgmlType::Q5K;
    assert!(bytes.len().is_multiple_of(ty.block_bytes()), "q5_K: {} bytes are not whole blocks", bytes.len());
    let blocks = bytes.len() / ty.block_bytes();
    let (mut values, mut supers, mut subs) =
        (vec![0i8; blocks * QK_K], Vec::with_capacity(2 * blocks), Vec::with_capacity(16 * blocks));
    for (block, y) in bytes.chunks_exact(ty.block_bytes()).zip(values.chunks_exact_mut(QK_K)) {
        supers.push(f16::from_le_bytes([block[0], block[1]]));
        supers.push(f16::from_le_bytes([block[2], block[3]]));
        let (scales, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
        for j in 0..QK_K / 32 {
            let (sc, m) = scale_min_k4(j, scales);
            subs.extend([sc, m]);
        }
        // As `q5_k` below: each 32 bytes of `qs` two sub-blocks, low nibbles first, and the fifth
        // bits of sub-block `j` bit `j` of `qh`.
        for (pair, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
            let (low, high) = y.split_at_mut(32);
            for (l, &q) in q.iter().enumerate() {
                low[l] = ((q & 0x0f) | if qh[l] & u1 != 0 { 16 } else { 0 }) as i8;
                high[l] = ((q >> 4) | if qh[l] & u2 != 0 { 16 } else { 0 }) as i8;
            }
        }
    }
    (values, supers, subs)
}

/// Whole Q6_K blocks taken apart into what [`crate::q6k_matmul`] holds, the same values: each
/// value `q - 32` as an i8, each block's `d` and each sub-block of 16's i8 scale.
///
/// # Panics
/// If `bytes` is not whole blocks.
pub fn split_q6_k(bytes: &[u8]) -> (Vec<i8>, Vec<f16>, Vec<i8>) {
    let ty = GgmlType::Q6K;
    assert!(bytes.len().is_multiple_of(ty.block_bytes()), "q6_K: {} bytes are not whole blocks", bytes.len());
    let blocks = bytes.len() / ty.block_bytes();
    let (mut values, mut supers, mut subs) =
        (vec![0i8; blocks * QK_K], Vec::with_capacity(blocks), Vec::with_capacity(16 * blocks));
    for (block, y) in bytes.chunks_exact(ty.block_bytes()).zip(values.chunks_exact_mut(QK_K)) {
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        supers.push(f16::from_le_bytes([block[208], block[209]]));
        subs.extend(scales.iter().map(|&s| s as i8));
        for (n, y) in y.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
            for l in 0..32 {
                y[l] = ((ql[l] & 0x0f) | (qh[l] & 3) << 4) as i8 - 32;
                y[l + 32] = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) as i8 - 32;
                y[l + 64] = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) as i8 - 32;
                y[l + 96] = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) as i8 - 32;
            }
        }
    }
    (values, supers, subs)
}

/// Whole Q3_K blocks taken apart into Q6_K's parts ([`split_q6_k`]), the same values: Q3_K is
/// Q6_K's form with fewer bits, `d · s · q` with an i8 scale `s` a sub-block of 16 and
/// `q` in -4..=3, so it is held and multiplied as Q6_K (llama.cpp's `dequantize_row_q3_K` rounds
/// `d · s` then `· q` in f32, as Q6_K's does).
///
/// # Panics
/// If `bytes` is not whole blocks.
pub fn split_q3_k(bytes: &[u8]) -> (Vec<i8>, Vec<f16>, Vec<i8>) {
    let ty = GgmlType::Q3K;
    assert!(bytes.len().is_multiple_of(ty.block_bytes()), "q3_K: {} bytes are not whole blocks", bytes.len());
    let blocks = bytes.len() / ty.block_bytes();
    let (mut values, mut supers, mut subs) =
        (Vec::with_capacity(blocks * QK_K), Vec::with_capacity(blocks), Vec::with_capacity(16 * blocks));
    for block in bytes.chunks_exact(ty.block_bytes()) {
        supers.push(f16::from_le_bytes([block[108], block[109]]));
        subs.extend(q3_k_scales(&block[96..108]));
        q3_k_values(block, |q| values.push(q));
    }
    (values, supers, subs)
}

/// The f16 at byte `at` of a block, widened.
fn f16_at(block: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[at], block[at + 1]])).to_f32()
}

/// `block_q8_0 { ggml_half d; int8_t qs[32]; }`.
fn q8_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, &q) in y.iter_mut().zip(&block[2..]) {
        *y = (q as i8) as f32 * d;
    }
}

/// `block_q4_0 { ggml_half d; uint8_t qs[16]; }`: byte `j` holds value `j` in its low nibble and
/// value `j + 16` in its high one.
fn q4_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    let (low, high) = y.split_at_mut(16);
    for (j, &q) in block[2..].iter().enumerate() {
        low[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
        high[j] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }`: nibbles as Q4_0's.
fn q4_1(block: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let (low, high) = y.split_at_mut(16);
    for (j, &q) in block[4..].iter().enumerate() {
        low[j] = (q & 0x0f) as f32 * d + m;
        high[j] = (q >> 4) as f32 * d + m;
    }
}

/// The 5-bit values of a Q5_0 or Q5_1 block: the nibbles as Q4_0's, the fifth bit of value `j`
/// at bit `j` of the little-endian `qh`.
fn five_bits(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    std::array::from_fn(|j| {
        let nibble = if j < 16 { qs[j] & 0x0f } else { qs[j - 16] >> 4 };
        nibble | (((qh >> j) & 1) as u8) << 4
    })
}

/// The 32 values `q - 16` of a Q5_0 block, Q8_0's values of the same scale `d`: a Q5_0 tensor
/// is held as Q8_0 exactly.
pub fn q5_0_values(block: &[u8]) -> [i8; 32] {
    five_bits(&block[2..6], &block[6..22]).map(|q| q as i8 - 16)
}

/// `block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }`.
fn q5_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, q) in y.iter_mut().zip(q5_0_values(block)) {
        *y = q as f32 * d;
    }
}

/// `block_q5_1 { ggml_half d; ggml_half m; uint8_t qh[4]; uint8_t qs[16]; }`.
fn q5_1(block: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    for (y, q) in y.iter_mut().zip(five_bits(&block[4..8], &block[8..24])) {
        *y = q as f32 * d + m;
    }
}

/// `block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d; ggml_half dmin; }`: each scale
/// byte holds a sub-block's scale (low nibble) and min (high nibble).
fn q2_k(block: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&block[..16], &block[16..80]);
    let (d, min) = (f16_at(block, 80), f16_at(block, 82));
    let mut out = y.iter_mut();
    let mut scale = scales.iter();
    for q in qs.chunks_exact(32) {
        for shift in [0, 2, 4, 6] {
            for half in q.chunks_exact(16) {
                let sc = scale.next().expect("16 scales");
                let dl = d * (sc & 0x0f) as f32;
                let ml = min * (sc >> 4) as f32;
                for &q in half {
                    *out.next().expect("256 values") = dl * ((q >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// `block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; }`: each
/// sub-block of 16 values is `d · s · q` ([`q3_k_scales`], [`q3_k_values`]).
fn q3_k(block: &[u8], y: &mut [f32]) {
    let d_all = f16_at(block, 108);
    let scales = q3_k_scales(&block[96..108]);
    let mut out = y.iter_mut().enumerate();
    q3_k_values(block, |q| {
        let (i, y) = out.next().expect("256 values");
        *y = d_all * scales[i / 16] as f32 * q as f32;
    });
}

/// A Q3_K block's sixteen 6-bit scales less 32, packed in 12 bytes: the low 4 bits in bytes 0–7,
/// the high 2 bits in bytes 8–11.
fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let low = match i {
            0..8 => packed[i] & 0x0f,
            _ => packed[i - 8] >> 4,
        };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// A Q3_K block's 256 values `q` in -4..=3, in order, to `each`: two bits in `qs`, lowered by 4
/// unless the value's bit in `hmask` is set.
fn q3_k_values(block: &[u8], mut each: impl FnMut(i8)) {
    let (hmask, qs) = (&block[..32], &block[32..96]);
    let mut m = 1u8;
    for q in qs.chunks_exact(32) {
        for shift in [0, 2, 4, 6] {
            for (half, hm) in q.chunks_exact(16).zip(hmask.chunks_exact(16)) {
                for (&q, &h) in half.iter().zip(hm) {
                    each(((q >> shift) & 3) as i8 - if h & m != 0 { 0 } else { 4 });
                }
            }
            m <<= 1;
        }
    }
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K or Q5_K block's 12 scale bytes
/// (`get_scale_min_k4`).
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    match j {
        0..4 => (q[j] & 63, q[j + 4] & 63),
        _ => ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)),
    }
}

/// `block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; }`: each 32
/// bytes of `qs` hold two sub-blocks, the first in the low nibbles.
fn q4_k(block: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, qs) = (&block[4..16], &block[16..144]);
    for (pair, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc, m) = scale_min_k4(2 * pair, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * pair + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (low, high) = y.split_at_mut(32);
        for (l, &q) in q.iter().enumerate() {
            low[l] = d1 * (q & 0x0f) as f32 - m1;
            high[l] = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// `block_q5_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t
/// qs[128]; }`: as Q4_K, with the fifth bit of value `l` of sub-block `s` at bit `s` of `qh[l]`.
fn q5_k(block: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
    for (pair, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc, m) = scale_min_k4(2 * pair, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * pair + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
        let (low, high) = y.split_at_mut(32);
        for (l, &q) in q.iter().enumerate() {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            low[l] = d1 * ((q & 0x0f) + h1) as f32 - m1;
            high[l] = d2 * ((q >> 4) + h2) as f32 - m2;
        }
    }
}

/// `block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }`: each half
/// of 128 values takes 64 bytes of `ql` (low nibbles), 32 of `qh` (two high bits each) and 8
/// scales.
fn q6_k(block: &[u8], y: &mut [f32]) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = f16_at(block, 208);
    for (n, y) in y.chunks_exact_mut(128).enumerate() {
        let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &scales[8 * n..]);
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | (qh[l] & 3) << 4) as i8 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) as i8 - 32;
            let q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) as i8 - 32;
            let scale = |k: usize| d * (sc[is + k] as i8) as f32;
            y[l] = scale(0) * q1 as f32;
            y[l + 32] = scale(2) * q2 as f32;
            y[l + 64] = scale(4) * q3 as f32;
            y[l + 96] = scale(6) * q4 as f32;
        }
    }
}
