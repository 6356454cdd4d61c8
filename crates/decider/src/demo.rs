//! The `demo` model: a tiny Qwen3.5 (the dense decider-2b architecture at toy widths) with
//! random weights from a fixed seed, and the Qwen3.5 test tokenizer. It makes every command
//! and test run offline; its answers are those of random weights, not of a trained decider.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Int, Tensor, TensorData};
use decider_ops::{
    BlockInts, Half, block_scales, half_bits, half_floats, q4_values, q8_rows, q8_values, quantize_q4, quantize_q8,
};
use half::f16;
use qwen35::weights::{Stored, half_of, scales_dims, stack_dims, stored, transpose_last2};
use qwen35::{Qwen35Config, Qwen35Model, Qwen35Ops, WeightFormat};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The seed of the demo weights.
pub const DEMO_SEED: u64 = 20_261_130;

/// The `decider_config.json` of the demo model.
pub const DEMO_DECIDER_CONFIG: &str = r#"{"version": "demo-random-weights", "release_date": "2026-11-30", "temperature": 1.0, "isolated_levels": true, "neutralize_none": false}"#;

/// Hybrid layout of the real models (three Gated DeltaNet layers, then gated attention) at
/// toy widths, with the full Qwen3.5 vocabulary so the real tokenizer's ids are valid.
const DEMO_CONFIG: &str = r#"{
  "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 4, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
  "linear_num_key_heads": 2, "linear_num_value_heads": 2,
  "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
}"#;

/// The demo network's config.
pub fn demo_config() -> Qwen35Config {
    Qwen35Config::from_json(DEMO_CONFIG).expect("the demo config is valid")
}

/// The demo network on `device`: the same weights on every backend and platform, because they
/// are drawn on the host from a ChaCha8 stream per parameter.
pub fn demo_model<B: Qwen35Ops>(device: &B::Device) -> Qwen35Model<B> {
    random_model(&demo_config(), WeightFormat::F32, device)
}

/// A network of any config with the demo's seeded random weights: the real widths for speed and
/// memory measurements without a checkpoint (`--model random:CONFIG`). In `q8` its projections,
/// experts and token tables are the Q8_0 rounding of the f32 network's; in `q4` its projections
/// and experts are the Q4_0 rounding (and the tables Q8_0); in `f16`/`bf16` all of them are the
/// nearest 16-bit floats.
pub fn random_model<B: Qwen35Ops>(config: &Qwen35Config, weights: WeightFormat, device: &B::Device) -> Qwen35Model<B> {
    config.init_with_weights::<B>(weights, device).map(&mut SeededWeights {
        next_stream: 0,
        pending_scales: None,
        path: Vec::new(),
    })
}

/// Replaces every float parameter, in module order, with uniform values in ±1/√fan_in
/// (±0.5 for vectors), each parameter from its own stream of [`DEMO_SEED`]. A Q8_0 or Q4_0 weight
/// draws its f32 weight from the stream the f32 parameter would (in the f32 orientation: `[in,
/// out]` for a projection, `[vocab, hidden]` for a token table), then holds its rounding:
/// values, and the scales that follow them.
struct SeededWeights {
    next_stream: u64,
    /// The scales of the block values just drawn: the next int parameter.
    pending_scales: Option<Vec<f16>>,
    /// Each field entered with the type of the module that holds it, innermost last.
    path: Vec<(String, String)>,
}

impl SeededWeights {
    /// `count` values in ±`bound` from the next stream.
    fn draw(&mut self, count: usize, bound: f32) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(DEMO_SEED);
        rng.set_stream(self.next_stream);
        self.next_stream += 1;
        (0..count).map(|_| rng.random_range(-bound..bound)).collect()
    }
}

impl SeededWeights {
    /// A `HalfWeight`'s values of `shape` (`[.., out, in]`), drawn as its f32 form is, as 16-bit
    /// patterns of the format variant's float.
    fn draw_half(&mut self, shape: &[usize]) -> (Vec<u16>, Half) {
        let (batch, d_out, d_in) = stack_dims(shape);
        let half = half_of(&self.path);
        let weights = match self.path.iter().any(|(_, owner)| owner == "Enum:TokenTable") {
            // A token table: drawn and stored `[vocab, hidden]`, as its f32 `Embedding`.
            true => self.draw(batch * d_out * d_in, 1.0 / (d_out as f32).sqrt()),
            // A projection: drawn as its f32 `[in, out]`, stored `[out, in]`.
            false => transpose_last2(&self.draw(batch * d_in * d_out, 1.0 / (d_in as f32).sqrt()), batch, d_in, d_out),
        };
        (weights.iter().map(|&w| half.from_f32(w).expect("the demo's weights are within ±1")).collect(), half)
    }
}

impl<B: Qwen35Ops> ModuleMapper<B> for SeededWeights {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_owned(), container_type.to_owned()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        // Only the shape is read: the lazy initial values are never drawn.
        let shape = param.lazy_shape();
        let dims = shape.dims::<D>();
        let device = param.lazy_device();
        let tensor = match self.path.last().map(|(field, owner)| stored(owner, field)) {
            Some(Stored::Half) => {
                let (bits, half) = self.draw_half(&dims);
                half_floats(bits, half, shape, &device)
            }
            _ => {
                let values =
                    self.draw(shape.num_elements(), if D >= 2 { 1.0 / (dims[D - 2] as f32).sqrt() } else { 0.5 });
                Tensor::from_data(TensorData::new(values, shape), &device)
            }
        };
        let id = param.id;
        param.transform_for_load(tensor, id)
    }

    fn map_int<const D: usize>(&mut self, param: Param<Tensor<B, D, Int>>) -> Param<Tensor<B, D, Int>> {
        let shape = param.lazy_shape();
        let device = param.lazy_device();
        let tensor = match self.path.last().map(|(field, owner)| stored(owner, field)) {
            Some(Stored::Q8Values { kernel_layout }) => {
                let held = B::block_storage().ints_shape(BlockInts::Q8Values, shape.dims());
                let (batch, d_out, d_in) = stack_dims(&held);
                let (values, tensor): (_, fn(_, _, _) -> _) = match kernel_layout {
                    // A projection: drawn as its f32 `[in, out]`, stored `[out, in]`.
                    true => (
                        transpose_last2(
                            &self.draw(batch * d_in * d_out, 1.0 / (d_in as f32).sqrt()),
                            batch,
                            d_in,
                            d_out,
                        ),
                        q8_values::<B, D>,
                    ),
                    // A token table: drawn and stored `[vocab, hidden]`, as its f32 `Embedding`.
                    false => (self.draw(batch * d_out * d_in, 1.0 / (d_out as f32).sqrt()), q8_rows::<B, D>),
                };
                let (values, scales) = quantize_q8(&values, d_in);
                self.pending_scales = Some(scales);
                tensor(values, held, &device)
            }
            Some(Stored::Q4Values) => {
                // Drawn as a projection's f32 `[in, out]`; the parameter holds two values a byte.
                let held = B::block_storage().ints_shape(BlockInts::Q4Bytes, shape.dims());
                let (batch, d_out, half_in) = stack_dims(&held);
                let d_in = 2 * half_in;
                let weights =
                    transpose_last2(&self.draw(batch * d_in * d_out, 1.0 / (d_in as f32).sqrt()), batch, d_in, d_out);
                let (packed, scales) = quantize_q4(&weights, d_in);
                self.pending_scales = Some(scales);
                q4_values(packed, held, &device)
            }
            Some(Stored::BlockScales) => {
                let scales = self.pending_scales.take().expect("a block module holds its values before its scales");
                let dims = scales_dims(scales.len(), shape.dims());
                block_scales(scales, dims, &device)
            }
            Some(Stored::Half) => half_bits(self.draw_half(&shape.dims::<D>()).0, shape, &device),
            _ => unreachable!("the only int parameters are blocks and 16-bit patterns"),
        };
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}
