//! Building a model from a [`TensorSource`], in one walk: each module's `load` asks a [`Loader`]
//! for its parameters by their checkpoint names, and the loader reads them from the source and
//! holds them in the format [`held_format`] gives, so a model is built filled, never filled after.
//!
//! The sources: a safetensors checkpoint or quantized folder ([`crate::weights`]), a GGUF file
//! ([`crate::gguf`]), seeded random weights ([`crate::seeded`]); without a source the loader
//! builds the model lazily (shapes only, values made on first use: burn's `Config::init`). [`Load::reading_only`] reads every
//! tensor and holds none: `decider quantize` writes what it reads ([`crate::quantize`]).
//!
//! Names: each module passes the names its checkpoint uses (`linear_attn`, `A_log`,
//! `conv1d.weight`), so the module tree and the checkpoint are matched where the module is
//! written, not by a table of type names.

use std::cell::{Cell, RefCell};

use burn::module::{Initializer, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};

use crate::error::LoadError;
use crate::value_heads::ValueHeadOrder;
use crate::weight::{Weight, WeightValues};
use crate::weight_format::{FormatOps, WeightFormat, WeightUse, held_as_stored, held_format};

/// The field of the `weights read` progress event ([`Loader::layers_built`]) that counts the
/// layers read so far (the name the event is emitted with there).
pub const LAYERS_DONE: &str = "layers_done";
/// The field of the `weights read` progress event that counts the model's layers.
pub const LAYERS_TOTAL: &str = "layers_total";

/// Where a model's tensors come from, by checkpoint name; values in the checkpoint's layout.
pub trait TensorSource {
    /// The prefix of the text model's names (`model.language_model` in released checkpoints,
    /// `model` in `save_pretrained` output); the output head `lm_head` is outside it.
    fn text_prefix(&self) -> &str;

    /// Tensor `name` of `shape`, as f32.
    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError>;

    /// Weight `name` of `dims` (`[..., out, in]`) in `format`, to be read as `usage`.
    fn weight(
        &self,
        name: &str,
        dims: &[usize],
        format: WeightFormat,
        usage: WeightUse,
    ) -> Result<WeightValues, LoadError>;

    /// The format weight `name` is held in when the source keeps each weight's own (a GGUF file
    /// loaded with `auto`: its tensors each have a type); `None`: the format the load asks for.
    /// Either way the format policy applies to it ([`held_as_stored`], [`held_format`]).
    fn stored_format(&self, _name: &str) -> Option<WeightFormat> {
        None
    }

    /// The order of the value heads in the columns of weight `name` (a DeltaNet's `out_proj`):
    /// grouped, as a checkpoint has them, unless the source keeps another ([`ValueHeadOrder`]).
    /// A source that passes on another's weights passes this on too: the mixer multiplies in
    /// the order it says.
    fn value_head_order(&self, _name: &str) -> ValueHeadOrder {
        ValueHeadOrder::Grouped
    }
}

/// One build of a model: its source, the format asked for, and what was built so far.
pub struct Load<'a, B: Backend> {
    device: &'a B::Device,
    requested: WeightFormat,
    source: Option<&'a dyn TensorSource>,
    /// Whether what is read is held (false: read and let go, as `decider quantize` does).
    hold: bool,
    error: RefCell<Option<LoadError>>,
    sizes: Cell<WeightSizes>,
}

/// The size of what a load built, counted as it is built (of a lazy model too, whose tensors
/// are not made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightSizes {
    /// Bytes of the parameters on their backend, in their formats.
    pub bytes: usize,
    /// Parameters (weights), whatever their format.
    pub parameters: usize,
}

impl<'a, B: FormatOps> Load<'a, B> {
    /// A lazy build: shapes only, each value made when first read.
    pub fn lazy(device: &'a B::Device, requested: WeightFormat) -> Self {
        Self { device, requested, source: None, hold: true, error: RefCell::new(None), sizes: Cell::default() }
    }

    /// A build from `source`.
    pub fn from(source: &'a dyn TensorSource, device: &'a B::Device, requested: WeightFormat) -> Self {
        Self { source: Some(source), ..Self::lazy(device, requested) }
    }

    /// This build reading every tensor and holding none (the model it makes is lazy).
    pub fn reading_only(self) -> Self {
        Self { hold: false, ..self }
    }

    /// The loader of the whole model, at the root of the checkpoint's names.
    pub fn root(&self) -> Loader<'_, 'a, B> {
        Loader { load: self, name: String::new() }
    }

    /// `module` as built, or the first error met while building it.
    pub fn finish<M>(self, module: M) -> Result<M, LoadError> {
        match self.error.into_inner() {
            Some(error) => Err(error),
            None => Ok(module),
        }
    }

    fn count(&self, bytes: usize, parameters: usize) {
        let sizes = self.sizes.get();
        self.sizes.set(WeightSizes { bytes: sizes.bytes + bytes, parameters: sizes.parameters + parameters });
    }

    /// The source to read from, unless there is none or an earlier read failed.
    fn source(&self) -> Option<&'a dyn TensorSource> {
        self.source.filter(|_| self.error.borrow().is_none())
    }

    /// `read`'s value, or `None` after recording its error.
    fn ok<T>(&self, read: Result<T, LoadError>) -> Option<T> {
        read.map_err(|error| *self.error.borrow_mut() = Some(error)).ok()
    }
}

/// A module's view of a [`Load`]: its place in the checkpoint's names.
pub struct Loader<'l, 'a, B: Backend> {
    load: &'l Load<'a, B>,
    /// The module's checkpoint name (`model.layers.3.linear_attn`); empty at the root.
    name: String,
}

impl<B: FormatOps> Loader<'_, '_, B> {
    /// The loader of the submodule `name` (a field, or a layer's index).
    pub fn at(&self, name: impl std::fmt::Display) -> Self {
        Loader { load: self.load, name: self.name_of(&name.to_string()) }
    }

    /// The loader of the text model, under the source's prefix.
    pub fn text_model(&self) -> Self {
        match self.load.source {
            Some(source) => self.at(source.text_prefix()),
            None => self.at("model"),
        }
    }

    /// Tells the log (`tracing`, at info) how far a build from a source has come, at about every
    /// tenth of the model's `of` layers: a model of tens of GB takes minutes to read. The counts
    /// are the event's fields [`LAYERS_DONE`] and [`LAYERS_TOTAL`], for a progress bar to read. A
    /// lazy build, which reads nothing, says nothing.
    pub fn layers_built(&self, done: usize, of: usize) {
        let new_tenth = done * 10 / of.max(1) != (done - 1) * 10 / of.max(1);
        if self.load.source.is_some() && (done == of || new_tenth) {
            tracing::info!(layers_done = done, layers_total = of, "weights read");
        }
    }

    /// The format the load was asked for.
    pub fn requested(&self) -> WeightFormat {
        self.load.requested
    }

    /// The order of the value heads in the columns of the source's weight `name`.
    pub fn value_head_order(&self, name: &str) -> ValueHeadOrder {
        self.load.source.map_or(ValueHeadOrder::Grouped, |source| source.value_head_order(&self.name_of(name)))
    }

    /// What was built so far.
    pub fn sizes(&self) -> WeightSizes {
        self.load.sizes.get()
    }

    /// The f32 tensor `name` of `shape`; lazily initialised by `init` without a source.
    pub fn param<const D: usize>(&self, name: &str, shape: [usize; D], init: Initializer) -> Param<Tensor<B, D>> {
        self.param_stored_as(name, shape, &shape, init)
    }

    /// The f32 tensor `name`, stored as `stored` (the same values in another shape: a conv kernel
    /// `[C, K]` stored as PyTorch's `[C, 1, K]`), held as `shape`.
    pub fn param_stored_as<const D: usize>(
        &self,
        name: &str,
        shape: [usize; D],
        stored: &[usize],
        init: Initializer,
    ) -> Param<Tensor<B, D>> {
        let count = shape.iter().product();
        self.load.count(count * size_of::<B::FloatElem>(), count);
        let values = self.load.source().and_then(|source| self.load.ok(source.f32(&self.name_of(name), stored)));
        match values {
            Some(values) if self.load.hold => {
                Param::from_tensor(Tensor::from_data(TensorData::new(values, shape), self.load.device))
            }
            _ => init.init(shape, self.load.device),
        }
    }

    /// The weight `name` of `dims` (`[..., out, in]`), read as `usage`, in the format the policy
    /// gives it ([`held_format`]).
    pub fn weight<const D: usize>(&self, name: &str, dims: [usize; D], usage: WeightUse) -> Weight<B, D> {
        let name = self.name_of(name);
        let format = match self.load.source.and_then(|source| source.stored_format(&name)) {
            Some(stored) => held_as_stored(stored, &name, &dims, usage),
            None => held_format(self.load.requested, &name, &dims, usage),
        };
        let device = self.load.device;
        let values = self.load.source().and_then(|source| self.load.ok(source.weight(&name, &dims, format, usage)));
        let weight = match values {
            Some(values) if self.load.hold => Weight::from_values(values, dims, format, usage, device),
            _ => Weight::lazy(dims, format, usage, device),
        };
        self.load.count(weight.bytes(), dims.iter().product());
        weight
    }

    fn name_of(&self, field: &str) -> String {
        match self.name.is_empty() {
            true => field.to_owned(),
            false => format!("{}.{field}", self.name),
        }
    }
}
