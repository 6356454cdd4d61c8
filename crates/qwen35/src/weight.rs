//! [`Weight`]: a weight matrix, or a stack of them, held in any [`WeightFormat`]. It is the one
//! place that knows the formats: the layers ([`crate::projection`], [`crate::moe`],
//! [`crate::token_table`]) call its products and row reads and never ask which format it is in.
//! Which format a weight gets is [`crate::weight_format::held_format`]'s; its values come from a
//! [`crate::loader::TensorSource`] as [`WeightValues`].

use crate::error::LoadError;
use crate::weight_format::{FormatOps, WeightFormat, WeightUse};
use burn::module::{Module, Param, ParamId};
use burn::tensor::{FloatDType, Int, Tensor, TensorData, backend::Backend};
use decider_ops::ggml_type::QK_K;
use decider_ops::q4k_matmul::generic::q4k_weight;
use decider_ops::q5k_matmul::generic::q5k_weight;
use decider_ops::q6k_matmul::generic::q6k_scaled;
use decider_ops::{
    ActivationBits, BlockInts, DenseMatmul, GgmlType, Half, Q6K_BLOCK, Q8_BLOCK, block_scales, block_scales_f32,
    dense_matmul, grouped_half_float_matmul, grouped_half_matmul, grouped_matmul, grouped_q4_matmul,
    grouped_q4k_matmul, grouped_q5k_matmul, grouped_q6k_matmul, grouped_q8_matmul, half_bits, half_bits_f32,
    half_float_matmul, half_floats, half_matmul, holds_half_floats, q4_matmul, q4_rows, q4_values, q4k_matmul,
    q4k_shapes, q5k_matmul, q5k_shapes, q6k_matmul, q6k_shapes, q8_matmul, q8_rows, q8_values, q8_values_f32,
    quantize_q4, quantize_q4_k, quantize_q8, split_q3_k, split_q4_k, split_q5_k, split_q6_k,
};
use half::f16;
use rayon::prelude::*;

/// A weight `[..., out, in]` (PyTorch's orientation; `D = 2` one matrix, `D = 3` the experts'
/// stack) in one [`WeightFormat`].
#[derive(Module, Debug)]
pub struct Weight<B: Backend, const D: usize> {
    pub held: Held<B, D>,
    /// `[..., out, in]`, whatever the format and layout.
    #[module(skip)]
    pub dims: [usize; D],
    #[module(skip)]
    pub format: WeightFormat,
    #[module(skip)]
    pub usage: WeightUse,
}

/// The tensors of a [`Weight`], one variant a format.
#[derive(Module, Debug)]
pub enum Held<B: Backend, const D: usize> {
    /// f32: `[..., in, out]` for a matmul (read in place by [`DenseMatmul`]), `[rows, width]` for
    /// a table.
    F32(Param<Tensor<B, D>>),
    /// f16 or bf16 (the weight's format says which), `[..., out, in]`.
    Half(HalfTensor<B, D>),
    /// Q8_0 blocks along `in` (`decider_ops::quantize_q8`).
    Q8(Blocks<B, D>),
    /// Q4_0 blocks along `in` (`decider_ops::quantize_q4`).
    Q4(Blocks<B, D>),
    /// A GGUF file's Q4_K blocks along `in` (`decider_ops::q4k_matmul`).
    Q4K(KBlocks<B, D>),
    /// A GGUF file's Q5_K blocks along `in` (`decider_ops::q5k_matmul`), the values laid out as
    /// Q8_0's.
    Q5K(KBlocks<B, D>),
    /// A GGUF file's Q6_K blocks along `in` (`decider_ops::q6k_matmul`), the values laid out as
    /// Q8_0's.
    Q6K(KBlocks<B, D>),
}

/// 16-bit floats, held as the device can ([`holds_half_floats`]).
#[derive(Module, Debug)]
pub enum HalfTensor<B: Backend, const D: usize> {
    /// A float tensor of the 16-bit dtype (`decider_ops::half_floats`): 2 bytes a weight.
    Floats(Param<Tensor<B, D>>),
    /// The 16-bit patterns in an int tensor (`decider_ops::half_bits`), where the device has no
    /// float tensor of this type.
    Bits(Param<Tensor<B, D, Int>>),
}

/// Block values and their scales (f16 bits), as the backend holds them
/// (`decider_ops::BlockStorage`).
#[derive(Module, Debug)]
pub struct Blocks<B: Backend, const D: usize> {
    pub values: Param<Tensor<B, D, Int>>,
    /// `[..., out, in / 32]`.
    pub scales: Param<Tensor<B, D, Int>>,
}

/// A k-quant's tensors, as the backend holds them (`decider_ops::q4k_matmul`,
/// `decider_ops::q5k_matmul` and `decider_ops::q6k_matmul` say what each holds).
#[derive(Module, Debug)]
pub struct KBlocks<B: Backend, const D: usize> {
    pub values: Param<Tensor<B, D, Int>>,
    /// Each super-block of 256's f16 scales.
    pub supers: Param<Tensor<B, D, Int>>,
    /// Each block's scales (and mins).
    pub subs: Param<Tensor<B, D, Int>>,
}

/// A weight's values on the host, in the checkpoint's orientation `[..., out, in]`, in its
/// format: what a tensor source gives and [`Weight::from_values`] takes.
#[derive(Debug)]
pub enum WeightValues {
    F32(Vec<f32>),
    /// 16-bit patterns of this float.
    Half(Half, Vec<u16>),
    Q8(Vec<i8>, Vec<f16>),
    /// Packed bytes (two values each) and scales.
    Q4(Vec<u8>, Vec<f16>),
    /// Q4_K's nibbles, super-block `(d, dmin)` and block `(sc, m)` (`decider_ops::split_q4_k`).
    Q4K(Vec<u8>, Vec<f16>, Vec<u8>),
    /// Q5_K's values, super-block `(d, dmin)` and block `(sc, m)` (`decider_ops::split_q5_k`).
    Q5K(Vec<i8>, Vec<f16>, Vec<u8>),
    /// Q6_K's values less 32, super-block `d` and block `sc` (`decider_ops::split_q6_k`).
    Q6K(Vec<i8>, Vec<f16>, Vec<i8>),
}

impl WeightValues {
    /// f32 `values` (rows of `d_in`) in `format`: the one conversion for sources that hold f32
    /// (a checkpoint converts as it reads, without an f32 copy: `crate::checkpoint`). `None`
    /// where a value is beyond the format's range (an f16 above 65,504).
    pub fn from_f32(values: Vec<f32>, d_in: usize, format: WeightFormat) -> Option<WeightValues> {
        Some(match format {
            WeightFormat::F32 => WeightValues::F32(values),
            WeightFormat::F16 | WeightFormat::Bf16 => {
                let half = format.half().expect("a 16-bit format");
                WeightValues::Half(half, values.par_iter().map(|&v| half.from_f32(v)).collect::<Option<_>>()?)
            }
            WeightFormat::Q8 => {
                let (values, scales) = quantize_q8(&values, d_in);
                WeightValues::Q8(values, scales)
            }
            WeightFormat::Q4 => {
                let (packed, scales) = quantize_q4(&values, d_in);
                WeightValues::Q4(packed, scales)
            }
            WeightFormat::Q4K => {
                let (packed, supers, subs) = split_q4_k(&quantize_q4_k(&values));
                WeightValues::Q4K(packed, supers, subs)
            }
            WeightFormat::Q5K | WeightFormat::Q6K => {
                unreachable!("{format} holds only a GGUF file's own blocks: nothing is quantized to it")
            }
        })
    }

    /// Weight `name` in llama.cpp's Q4_K blocks `bytes` (a GGUF file's or a quantized folder's),
    /// taken apart ([`split_q4_k`]); refused, naming the block, where a scale or min of it is not
    /// finite.
    pub fn from_q4_k(name: &str, bytes: &[u8]) -> Result<WeightValues, LoadError> {
        let (packed, supers, subs) = split_q4_k(bytes);
        finite_scales(name, GgmlType::Q4K, &supers, 2).map(|()| WeightValues::Q4K(packed, supers, subs))
    }

    /// [`WeightValues::from_q4_k`] for Q5_K blocks ([`split_q5_k`]).
    pub fn from_q5_k(name: &str, bytes: &[u8]) -> Result<WeightValues, LoadError> {
        let (values, supers, subs) = split_q5_k(bytes);
        finite_scales(name, GgmlType::Q5K, &supers, 2).map(|()| WeightValues::Q5K(values, supers, subs))
    }

    /// [`WeightValues::from_q4_k`] for Q6_K blocks ([`split_q6_k`]).
    pub fn from_q6_k(name: &str, bytes: &[u8]) -> Result<WeightValues, LoadError> {
        let (values, supers, subs) = split_q6_k(bytes);
        finite_scales(name, GgmlType::Q6K, &supers, 1).map(|()| WeightValues::Q6K(values, supers, subs))
    }

    /// Q3_K blocks as Q6_K's parts, the same values ([`split_q3_k`]).
    pub fn from_q3_k(name: &str, bytes: &[u8]) -> Result<WeightValues, LoadError> {
        let (values, supers, subs) = split_q3_k(bytes);
        finite_scales(name, GgmlType::Q3K, &supers, 1).map(|()| WeightValues::Q6K(values, supers, subs))
    }
}

/// `Ok` unless one of a k-quant's super-block scales (`per_block` a block) is not finite.
fn finite_scales(name: &str, ggml_type: GgmlType, supers: &[f16], per_block: usize) -> Result<(), LoadError> {
    match supers.iter().position(|d| !d.is_finite()) {
        None => Ok(()),
        Some(at) => Err(LoadError::Blocks {
            name: name.to_owned(),
            reason: format!("a scale of {} block {} is {}", ggml_type.name(), at / per_block, supers[at]),
        }),
    }
}

impl WeightValues {
    /// These values (one of `parts` of the same size, such as one expert's weight) with room
    /// made for all the parts: the first of a stack built with [`WeightValues::append`].
    pub fn with_room_for(mut self, parts: usize) -> Self {
        fn room<T>(values: &mut Vec<T>, parts: usize) {
            values.reserve_exact(values.len() * parts.saturating_sub(1));
        }
        match &mut self {
            WeightValues::F32(values) => room(values, parts),
            WeightValues::Half(_, bits) => room(bits, parts),
            WeightValues::Q8(values, scales) => {
                room(values, parts);
                room(scales, parts);
            }
            WeightValues::Q4(packed, scales) => {
                room(packed, parts);
                room(scales, parts);
            }
            WeightValues::Q4K(packed, supers, subs) => {
                room(packed, parts);
                room(supers, parts);
                room(subs, parts);
            }
            WeightValues::Q5K(values, supers, subs) => {
                room(values, parts);
                room(supers, parts);
                room(subs, parts);
            }
            WeightValues::Q6K(values, supers, subs) => {
                room(values, parts);
                room(supers, parts);
                room(subs, parts);
            }
        }
        self
    }

    /// Appends `part`, the next rows of the same weight in the same format.
    pub fn append(&mut self, part: WeightValues) {
        match (self, part) {
            (WeightValues::F32(values), WeightValues::F32(part)) => values.extend(part),
            (WeightValues::Half(_, bits), WeightValues::Half(_, part)) => bits.extend(part),
            (WeightValues::Q8(values, scales), WeightValues::Q8(part, part_scales)) => {
                values.extend(part);
                scales.extend(part_scales);
            }
            (WeightValues::Q4(packed, scales), WeightValues::Q4(part, part_scales)) => {
                packed.extend(part);
                scales.extend(part_scales);
            }
            (WeightValues::Q4K(packed, supers, subs), WeightValues::Q4K(part, part_supers, part_subs)) => {
                packed.extend(part);
                supers.extend(part_supers);
                subs.extend(part_subs);
            }
            (WeightValues::Q5K(values, supers, subs), WeightValues::Q5K(part, part_supers, part_subs)) => {
                values.extend(part);
                supers.extend(part_supers);
                subs.extend(part_subs);
            }
            (WeightValues::Q6K(values, supers, subs), WeightValues::Q6K(part, part_supers, part_subs)) => {
                values.extend(part);
                supers.extend(part_supers);
                subs.extend(part_subs);
            }
            _ => unreachable!("the parts of a weight are read in one format"),
        }
    }
}

impl<B: FormatOps, const D: usize> Weight<B, D> {
    /// The weight of `values` (`[..., out, in]` = `dims`, in `format`), for `usage`, on `device`.
    pub fn from_values(
        values: WeightValues,
        dims: [usize; D],
        format: WeightFormat,
        usage: WeightUse,
        device: &B::Device,
    ) -> Self {
        let held = match (values, usage) {
            (WeightValues::F32(values), WeightUse::Matmul(_)) => {
                let (batch, d_out, d_in) = stack_dims(&dims);
                let mut held = dims;
                held.swap(D - 2, D - 1);
                // The checkpoint's order is let go before the tensor is made from the transpose.
                let values = {
                    let transposed = transpose_last2(&values, batch, d_out, d_in);
                    drop(values);
                    transposed
                };
                Held::F32(Param::from_tensor(Tensor::from_data(TensorData::new(values, held), device)))
            }
            (WeightValues::F32(values), WeightUse::Rows) => {
                Held::F32(Param::from_tensor(Tensor::from_data(TensorData::new(values, dims), device)))
            }
            (WeightValues::Half(half, bits), _) => Held::Half(match holds_half_floats::<B>(half, device) {
                true => HalfTensor::Floats(Param::from_tensor(half_floats(bits, half, dims, device))),
                false => HalfTensor::Bits(int_param(half_bits(bits, dims, device))),
            }),
            (WeightValues::Q8(values, scales), usage) => {
                let values = match usage {
                    WeightUse::Matmul(_) => q8_values(values, dims, device),
                    WeightUse::Rows => q8_rows(values, dims, device),
                };
                Held::Q8(Blocks { values: int_param(values), scales: scales_param(scales, dims, device) })
            }
            (WeightValues::Q4(packed, scales), _) => {
                let mut bytes = dims;
                bytes[D - 1] /= 2;
                Held::Q4(Blocks {
                    values: int_param(q4_values(packed, bytes, device)),
                    scales: scales_param(scales, dims, device),
                })
            }
            (WeightValues::Q4K(packed, supers, subs), usage) => {
                let d_in = dims[D - 1];
                let values = match usage {
                    WeightUse::Matmul(_) => q4_values(packed, last(dims, d_in / 2), device),
                    WeightUse::Rows => q4_rows(packed, last(dims, d_in / 2), device),
                };
                Held::Q4K(KBlocks {
                    values: int_param(values),
                    supers: int_param(block_scales(supers, last(dims, d_in / QK_K * 2), device)),
                    subs: int_param(q4_rows(subs, last(dims, d_in / Q8_BLOCK * 2), device)),
                })
            }
            (WeightValues::Q5K(values, supers, subs), usage) => {
                let d_in = dims[D - 1];
                let values = match usage {
                    WeightUse::Matmul(_) => q8_values(values, dims, device),
                    WeightUse::Rows => q8_rows(values, dims, device),
                };
                Held::Q5K(KBlocks {
                    values: int_param(values),
                    supers: int_param(block_scales(supers, last(dims, d_in / QK_K * 2), device)),
                    subs: int_param(q4_rows(subs, last(dims, d_in / Q8_BLOCK * 2), device)),
                })
            }
            (WeightValues::Q6K(values, supers, subs), usage) => {
                let d_in = dims[D - 1];
                let values = match usage {
                    WeightUse::Matmul(_) => q8_values(values, dims, device),
                    WeightUse::Rows => q8_rows(values, dims, device),
                };
                Held::Q6K(KBlocks {
                    values: int_param(values),
                    supers: int_param(block_scales(supers, last(dims, d_in / QK_K), device)),
                    subs: int_param(q8_rows(subs, last(dims, d_in / Q6K_BLOCK), device)),
                })
            }
        };
        Weight { held, dims, format, usage }
    }

    /// A weight of `dims` in `format` whose values are not made until first read: uniform in
    /// ±1/√in in f32 (burn's `Linear` default), normal in a table (burn's `Embedding` default),
    /// zero in the other formats, which are only ever filled from a source.
    pub fn lazy(dims: [usize; D], format: WeightFormat, usage: WeightUse, device: &B::Device) -> Self {
        let storage = B::block_storage();
        let mut scales = dims;
        scales[D - 1] /= Q8_BLOCK;
        let blocks = |ints| Blocks {
            values: lazy_ints(storage.shape(ints, ints_dims(dims, ints)), device),
            scales: lazy_ints(storage.shape(BlockInts::ScaleBits, scales), device),
        };
        let held = match format {
            WeightFormat::F32 => {
                let d_in = dims[D - 1] as f64;
                let (init, shape) = match usage {
                    WeightUse::Matmul(_) => {
                        let mut held = dims;
                        held.swap(D - 2, D - 1);
                        let bound = 1.0 / d_in.sqrt();
                        (burn::module::Initializer::Uniform { min: -bound, max: bound }, held)
                    }
                    WeightUse::Rows => (burn::module::Initializer::Normal { mean: 0.0, std: 1.0 }, dims),
                };
                Held::F32(init.init(shape, device))
            }
            WeightFormat::F16 | WeightFormat::Bf16 => {
                let half = format.half().expect("a 16-bit format");
                Held::Half(match holds_half_floats::<B>(half, device) {
                    true => HalfTensor::Floats(Param::uninitialized(
                        ParamId::new(),
                        move |device, _| Tensor::zeros(dims, (device, half.dtype())),
                        device.clone(),
                        false,
                        dims.into(),
                    )),
                    false => HalfTensor::Bits(lazy_ints(dims, device)),
                })
            }
            WeightFormat::Q8 => Held::Q8(blocks(BlockInts::Q8Values)),
            WeightFormat::Q4 => Held::Q4(blocks(BlockInts::Q4Bytes)),
            WeightFormat::Q4K => Held::Q4K(lazy_k_blocks(q4k_shapes::<B, D>(dims), device)),
            WeightFormat::Q5K => Held::Q5K(lazy_k_blocks(q5k_shapes::<B, D>(dims), device)),
            WeightFormat::Q6K => Held::Q6K(lazy_k_blocks(q6k_shapes::<B, D>(dims), device)),
        };
        Weight { held, dims, format, usage }
    }

    /// The bytes this weight's tensors take on its backend, from their shapes and dtypes alone
    /// (a lazy weight is not made).
    pub fn bytes(&self) -> usize {
        let storage = B::block_storage();
        let ints = |param: &Param<Tensor<B, D, Int>>, dtype: burn::tensor::DType| {
            param.lazy_shape().num_elements() * dtype.size()
        };
        let blocks = |blocks: &Blocks<B, D>, values| {
            ints(&blocks.values, storage.dtype::<B>(values))
                + ints(&blocks.scales, storage.dtype::<B>(BlockInts::ScaleBits))
        };
        let k_blocks = |blocks: &KBlocks<B, D>, [values, supers, subs]: [BlockInts; 3]| {
            ints(&blocks.values, storage.dtype::<B>(values))
                + ints(&blocks.supers, storage.dtype::<B>(supers))
                + ints(&blocks.subs, storage.dtype::<B>(subs))
        };
        match &self.held {
            Held::F32(param) => param.lazy_shape().num_elements() * size_of::<B::FloatElem>(),
            Held::Half(HalfTensor::Floats(param)) => param.lazy_shape().num_elements() * size_of::<u16>(),
            Held::Half(HalfTensor::Bits(bits)) => ints(bits, B::half_bits_dtype()),
            Held::Q8(held) => blocks(held, BlockInts::Q8Values),
            Held::Q4(held) => blocks(held, BlockInts::Q4Bytes),
            Held::Q4K(held) => k_blocks(held, [BlockInts::Q4Bytes, BlockInts::ScaleBits, BlockInts::Q4Bytes]),
            Held::Q5K(held) => k_blocks(held, [BlockInts::Q8Values, BlockInts::ScaleBits, BlockInts::Q4Bytes]),
            Held::Q6K(held) => k_blocks(held, [BlockInts::Q8Values, BlockInts::ScaleBits, BlockInts::Q8Values]),
        }
    }

    /// Which 16-bit float a half weight is.
    fn half(&self) -> Half {
        self.format.half().expect("a weight held in 16 bits is of a 16-bit format")
    }

    /// How finely a Q8_0 or Q6_K product rounds this weight's input.
    fn activation_bits(&self) -> ActivationBits {
        match self.usage {
            WeightUse::Matmul(input) => input.activation_bits(),
            WeightUse::Rows => ActivationBits::Eight,
        }
    }
}

impl<B: FormatOps + DenseMatmul> Weight<B, 2> {
    /// `x [n, in] · Wᵀ -> [n, out]`.
    pub fn matmul(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        match &self.held {
            Held::F32(weight) => dense_matmul(x, weight.val()),
            Held::Half(HalfTensor::Floats(weight)) => half_float_matmul(x, weight.val()),
            Held::Half(HalfTensor::Bits(bits)) => half_matmul(x, bits.val(), self.half()),
            Held::Q8(blocks) => q8_matmul(x, blocks.values.val(), blocks.scales.val(), self.activation_bits()),
            Held::Q4(blocks) => q4_matmul(x, blocks.values.val(), blocks.scales.val()),
            Held::Q4K(k) => q4k_matmul(x, k.values.val(), k.supers.val(), k.subs.val()),
            Held::Q5K(k) => q5k_matmul(x, k.values.val(), k.supers.val(), k.subs.val()),
            Held::Q6K(k) => q6k_matmul(x, k.values.val(), k.supers.val(), k.subs.val(), self.activation_bits()),
        }
    }

    /// Rows `index [n]` of a table in f32: `[n, in]`.
    pub fn rows(&self, index: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        debug_assert_eq!(self.usage, WeightUse::Rows, "rows are read from a table");
        match &self.held {
            Held::F32(weight) => weight.val().select(0, index),
            Held::Half(HalfTensor::Floats(weight)) => weight.val().select(0, index).cast(FloatDType::F32),
            Held::Half(HalfTensor::Bits(bits)) => half_bits_f32(bits.val().select(0, index), self.half()),
            Held::Q8(blocks) => {
                // Cast before the scales are gathered with the same index: with both gathers
                // queued before the cast, burn-fusion 0.21 on wgpu scaled rows by the wrong
                // scales (`tests/weight_formats.rs` checks every backend).
                let values = q8_values_f32(blocks.values.val().select(0, index.clone()));
                dequantize_q8(values, blocks.scales.val().select(0, index))
            }
            Held::Q6K(k) => {
                // Each gather cast before the next, as Q8_0's above.
                let values = q8_values_f32(k.values.val().select(0, index.clone()));
                let subs = q8_values_f32(k.subs.val().select(0, index.clone()));
                q6k_scaled(values, block_scales_f32(k.supers.val().select(0, index), self.dims[1] / QK_K), subs)
            }
            Held::Q4K(k) | Held::Q5K(k) => self.k_quant_rows(k, |ints| ints.val().select(0, index.clone())),
            Held::Q4(_) => unreachable!("the format policy holds no table in Q4_0 (`held_format`)"),
        }
    }

    /// Every row's dot product with each of `x [n, in]`: `[n, rows]`. A table in another format
    /// than f32 is widened [`ROWS_WIDENED`] rows at a time.
    pub fn row_products(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        if let Held::F32(weight) = &self.held {
            return x.matmul(weight.val().transpose());
        }
        let [rows, _] = self.dims;
        let parts = (0..rows)
            .step_by(ROWS_WIDENED)
            .map(|start| x.clone().matmul(self.row_range(start, ROWS_WIDENED.min(rows - start)).transpose()))
            .collect();
        Tensor::cat(parts, 1)
    }

    /// Rows `start..start + count` of a table in f32.
    fn row_range(&self, start: usize, count: usize) -> Tensor<B, 2> {
        debug_assert_eq!(self.usage, WeightUse::Rows, "rows are read from a table");
        match &self.held {
            Held::F32(weight) => weight.val().narrow(0, start, count),
            Held::Half(HalfTensor::Floats(weight)) => weight.val().narrow(0, start, count).cast(FloatDType::F32),
            Held::Half(HalfTensor::Bits(bits)) => half_bits_f32(bits.val().narrow(0, start, count), self.half()),
            Held::Q8(blocks) => dequantize_q8(
                q8_values_f32(blocks.values.val().narrow(0, start, count)),
                blocks.scales.val().narrow(0, start, count),
            ),
            Held::Q6K(k) => q6k_scaled(
                q8_values_f32(k.values.val().narrow(0, start, count)),
                block_scales_f32(k.supers.val().narrow(0, start, count), self.dims[1] / QK_K),
                q8_values_f32(k.subs.val().narrow(0, start, count)),
            ),
            Held::Q4K(k) | Held::Q5K(k) => self.k_quant_rows(k, |ints| ints.val().narrow(0, start, count)),
            Held::Q4(_) => unreachable!("the format policy holds no table in Q4_0 (`held_format`)"),
        }
    }

    /// The rows `pick` takes of each part of this table's Q4_K or Q5_K blocks `k`, in f32.
    fn k_quant_rows(
        &self,
        k: &KBlocks<B, 2>,
        pick: impl Fn(&Param<Tensor<B, 2, Int>>) -> Tensor<B, 2, Int>,
    ) -> Tensor<B, 2> {
        let (values, supers, subs) = (pick(&k.values), pick(&k.supers), pick(&k.subs));
        match self.held {
            Held::Q4K(_) => q4k_weight(values, supers, subs, self.dims[1]),
            Held::Q5K(_) => q5k_weight(values, supers, subs, self.dims[1]),
            _ => unreachable!("the blocks of a Q4_K or Q5_K table"),
        }
    }
}

impl<B: FormatOps + DenseMatmul> Weight<B, 3> {
    /// `x [rows, in]`, sorted by expert with `counts [experts]` rows each, times each row's
    /// expert's `Wᵀ`: `[rows, out]`.
    pub fn grouped_matmul(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match &self.held {
            Held::F32(weight) => grouped_matmul(x, weight.val(), counts),
            Held::Half(HalfTensor::Floats(weight)) => grouped_half_float_matmul(x, weight.val(), counts),
            Held::Half(HalfTensor::Bits(bits)) => grouped_half_matmul(x, bits.val(), counts, self.half()),
            Held::Q8(blocks) => {
                grouped_q8_matmul(x, blocks.values.val(), blocks.scales.val(), counts, self.activation_bits())
            }
            Held::Q4(blocks) => grouped_q4_matmul(x, blocks.values.val(), blocks.scales.val(), counts),
            Held::Q4K(k) => grouped_q4k_matmul(x, k.values.val(), k.supers.val(), k.subs.val(), counts),
            Held::Q5K(k) => grouped_q5k_matmul(x, k.values.val(), k.supers.val(), k.subs.val(), counts),
            Held::Q6K(k) => {
                grouped_q6k_matmul(x, k.values.val(), k.supers.val(), k.subs.val(), counts, self.activation_bits())
            }
        }
    }
}

/// Rows widened at a time by [`Weight::row_products`]: 4,096 rows of 2,048 values are 64 MiB
/// of f32 (cast, then scaled), where the whole table of decider-2b would be 1.9 GiB.
const ROWS_WIDENED: usize = 4096;

/// `values [n, width]` (as floats) times their blocks' `scales [n, width / 32]` (f16 bits).
fn dequantize_q8<B: FormatOps>(values: Tensor<B, 2>, scales: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let [rows, width] = values.dims();
    let blocks = width / Q8_BLOCK;
    (values.reshape([rows, blocks, Q8_BLOCK]) * block_scales_f32(scales, blocks).reshape([rows, blocks, 1]))
        .reshape([rows, width])
}

/// The scales of a weight of `dims` in blocks, as a parameter.
fn scales_param<B: FormatOps, const D: usize>(
    scales: Vec<f16>,
    mut dims: [usize; D],
    device: &B::Device,
) -> Param<Tensor<B, D, Int>> {
    dims[D - 1] /= Q8_BLOCK;
    int_param(block_scales(scales, dims, device))
}

/// `dims` with its last dimension `width`.
fn last<const D: usize>(mut dims: [usize; D], width: usize) -> [usize; D] {
    dims[D - 1] = width;
    dims
}

/// A k-quant's lazy tensors of shapes `(values, supers, subs)`.
fn lazy_k_blocks<B: Backend, const D: usize>(
    (values, supers, subs): ([usize; D], [usize; D], [usize; D]),
    device: &B::Device,
) -> KBlocks<B, D> {
    KBlocks { values: lazy_ints(values, device), supers: lazy_ints(supers, device), subs: lazy_ints(subs, device) }
}

/// An int tensor as a parameter.
fn int_param<B: Backend, const D: usize>(tensor: Tensor<B, D, Int>) -> Param<Tensor<B, D, Int>> {
    Param::initialized(ParamId::new(), tensor)
}

/// The count of `ints` a row of a weight of `dims` has: a value each, or a byte each two.
fn ints_dims<const D: usize>(mut dims: [usize; D], ints: BlockInts) -> [usize; D] {
    if ints == BlockInts::Q4Bytes {
        dims[D - 1] /= 2;
    }
    dims
}

/// A lazy zero int parameter (nothing is allocated until it is read).
fn lazy_ints<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Param<Tensor<B, D, Int>> {
    Param::uninitialized(
        ParamId::new(),
        move |device, _| Tensor::zeros(shape, device),
        device.clone(),
        false,
        shape.into(),
    )
}

/// `(weights, rows, cols)` of a weight `[rows, cols]` (one weight) or a stack of them
/// `[weights, rows, cols]` (the experts).
pub(crate) fn stack_dims(shape: &[usize]) -> (usize, usize, usize) {
    match *shape {
        [rows, cols] => (1, rows, cols),
        [weights, rows, cols] => (weights, rows, cols),
        _ => unreachable!("weights are [rows, cols] or stacked [weights, rows, cols], not {shape:?}"),
    }
}

/// Transposes each of `batch` row-major `[rows, cols]` matrices to `[cols, rows]`, in tiles
/// (so both sides are read and written a cache line at a time), in parallel over output rows.
pub(crate) fn transpose_last2(values: &[f32], batch: usize, rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut out = vec![0.0; values.len()];
    if values.is_empty() {
        return out;
    }
    let matrix = rows * cols;
    debug_assert_eq!(values.len(), batch * matrix);
    out.par_chunks_mut(matrix).zip(values.par_chunks(matrix)).for_each(|(out, src)| {
        // Each task writes TILE output rows `c0..`: `dst[c][r] = src[r][c0 + c]`.
        out.par_chunks_mut(rows * TILE).enumerate().for_each(|(tile, dst)| {
            let (c0, width) = (tile * TILE, dst.len() / rows);
            for r0 in (0..rows).step_by(TILE) {
                for c in 0..width {
                    for r in r0..(r0 + TILE).min(rows) {
                        dst[c * rows + r] = src[r * cols + c0 + c];
                    }
                }
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::transpose_last2;

    #[test]
    fn tiled_transpose_equals_the_definition() {
        for (batch, rows, cols) in [(1, 1, 1), (1, 3, 70), (2, 33, 31), (3, 64, 65), (1, 100, 1), (2, 1, 40)] {
            let values: Vec<f32> = (0..batch * rows * cols).map(|i| i as f32).collect();
            let out = transpose_last2(&values, batch, rows, cols);
            for b in 0..batch {
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(
                            out[b * rows * cols + c * rows + r],
                            values[b * rows * cols + r * cols + c],
                            "{batch}x{rows}x{cols}"
                        );
                    }
                }
            }
        }
    }
}
