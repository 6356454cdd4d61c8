//! The decision engine: a Qwen3.5 model, its tokenizer and `decider_config.json`, generic over
//! the burn backend. Rows of a request share their state: the common prefix runs once and its
//! cache is forked for every question row, which gives the same answers as
//! running each row from scratch.

use std::path::Path;

use crate::python_json::Json;
use burn::tensor::{Int, Tensor, TensorData};
use qwen35::Qwen35Model;
use qwen35::{Qwen35Ops, WeightChoice, WeightFormat};

use crate::answer::assemble;
use crate::config::DeciderConfig;
use crate::demo::demo_model;
use crate::error::DeciderError;
use crate::prompt::{Plan, Row};
use crate::prompter::Prompter;
use crate::readout::probabilities;
use crate::schedule::{batches, schedule};
use crate::tokenizer::Tokenizer;
use crate::wire::{SystemOneRequest, SystemOneResponse, Usage};
use crate::working_memory::WorkingMemory;

/// A loaded decider model on backend `B`.
pub struct Decider<B: Qwen35Ops> {
    model: Qwen35Model<B>,
    prompter: Prompter,
    /// The output head's label rows, `[hidden, 255]` and contiguous: a decision never computes
    /// the full vocabulary projection.
    label_weights: Tensor<B, 2>,
    device: B::Device,
    source: String,
    share_prefix: bool,
}

impl<B: Qwen35Ops> Decider<B> {
    /// Loads a model folder: `config.json`, safetensors weights, `tokenizer.json` and
    /// `decider_config.json`.
    pub fn load(dir: impl AsRef<Path>, device: &B::Device) -> Result<Self, DeciderError> {
        Self::load_with_weights(dir, WeightFormat::F32, device)
    }

    /// [`Decider::load`] with the projections, experts and token tables held in `weights` (a
    /// format, or `auto` settled from the folder; activations, norms, the router, the recurrent
    /// state and the readout stay f32).
    pub fn load_with_weights(
        dir: impl AsRef<Path>,
        weights: impl Into<WeightChoice>,
        device: &B::Device,
    ) -> Result<Self, DeciderError> {
        let dir = dir.as_ref();
        // The small decider_config.json first: a mistake in it stops the load before the weights.
        let config = DeciderConfig::from_dir(dir)?;
        let prompter = || Prompter::with_config(dir, config);
        let network = || Ok(qwen35::load_model_with_weights::<B>(dir, weights, device)?.1);
        Self::build(prompter, network, device, dir.display().to_string())
    }

    /// Loads a GGUF file (llama.cpp's model file: settings, tokenizer and weights in one file)
    /// with its weights in `weights` (`auto`: each as stored), and the `decider_config.json`
    /// beside it, which a GGUF file does not carry and a decision needs (labels, temperatures,
    /// layout).
    pub fn load_gguf(
        path: impl AsRef<Path>,
        weights: impl Into<WeightChoice>,
        device: &B::Device,
    ) -> Result<Self, DeciderError> {
        let path = path.as_ref();
        let config = DeciderConfig::beside_gguf(path)?;
        let file = qwen35::gguf::GgufFile::open(path)?;
        let prompter = || Ok(Prompter { tokenizer: Tokenizer::from_gguf(&file)?, config });
        let network = || Ok(qwen35::gguf::model_of::<B>(&file, weights, device)?.1);
        Self::build(prompter, network, device, path.display().to_string())
    }

    /// The `demo` model (random weights from a fixed seed, test tokenizer).
    pub fn demo(device: &B::Device) -> Self {
        Self::build(|| Ok(Prompter::demo()), || Ok(demo_model(device)), device, "demo".into())
            .expect("the demo model fits its tokenizer")
    }

    /// [`Decider::new`] from a prompter and a network made at the same time: `prompter` runs on a
    /// second thread while this one runs `network` (reading a Qwen3.5 tokenizer takes most of a
    /// second on one core). A prompter's error is reported before the network's.
    pub fn build(
        prompter: impl FnOnce() -> Result<Prompter, DeciderError> + Send,
        network: impl FnOnce() -> Result<Qwen35Model<B>, DeciderError>,
        device: &B::Device,
        source: String,
    ) -> Result<Self, DeciderError> {
        let (prompter, network) = std::thread::scope(|scope| {
            let prompter = scope.spawn(prompter);
            let network = network();
            (prompter.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), network)
        });
        let prompter = prompter?;
        Self::new(network?, prompter, device, source)
    }

    /// A decider from parts; the tokenizer's ids must fit the model's vocabulary.
    pub fn new(
        model: Qwen35Model<B>,
        prompter: Prompter,
        device: &B::Device,
        source: String,
    ) -> Result<Self, DeciderError> {
        let [vocab, _] = model.embed_tokens.dims();
        if prompter.tokenizer.vocab_size() > vocab {
            return Err(DeciderError::Model(format!(
                "the tokenizer has {} tokens but the model's embedding has {vocab} rows",
                prompter.tokenizer.vocab_size()
            )));
        }
        let label_ids = prompter.tokenizer.labels().ids.iter().map(|&id| id as i64).collect::<Vec<_>>();
        let count = label_ids.len();
        let index = Tensor::<B, 1, Int>::from_data(TensorData::new(label_ids, [count]), device);
        // Held contiguous, not as a transposed view: CubeCL's matmul autotune keys a transposed
        // right-hand side by its inner width alone, so this 255-column product would share the
        // cached kernel of a 256-column one, and the vector-matrix kernels that need the columns
        // to be a multiple of the plane size fail to launch (tracel-ai/cubecl#1611). Contiguous,
        // the key records the columns' alignment and the tuner picks among kernels that launch.
        let label_weights = Tensor::from_data(model.head().rows(index).transpose().into_data(), device);
        Ok(Self { model, prompter, label_weights, device: device.clone(), source, share_prefix: true })
    }

    /// One temperature for every answer type instead of the config's (`Decider(temperature=...)`,
    /// `DECIDER_TEMPERATURE`); it must be finite and positive.
    pub fn with_temperature(mut self, temperature: f64) -> Result<Self, DeciderError> {
        self.prompter.config = self.prompter.config.with_temperature(temperature)?;
        Ok(self)
    }

    /// Runs each row from scratch and alone, at batch 1, instead of sharing the common prefix
    /// and batches: the plain path the shared ones are compared with.
    pub fn with_shared_prefix(mut self, share: bool) -> Self {
        self.share_prefix = share;
        self
    }

    /// The tokenizer and config.
    pub fn prompter(&self) -> &Prompter {
        &self.prompter
    }

    /// The model folder, or `demo`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `"decider-" + version`.
    pub fn name(&self) -> &str {
        &self.prompter.config.model_name
    }

    /// The network.
    pub fn model(&self) -> &Qwen35Model<B> {
        &self.model
    }

    /// decider-ai's `Decider.system_one(state, questions)` with the defaults (independent rows):
    /// the library's prompt ([`Prompter::plan_library`], which neutralises "none of the above"
    /// options when the config asks).
    pub fn system_one<V: Into<Json>>(
        &self,
        state: impl Into<Json>,
        questions: impl IntoIterator<Item = (String, V)>,
    ) -> Result<SystemOneResponse, DeciderError> {
        let plan = self.prompter.plan_library(&SystemOneRequest::new(state, questions))?;
        self.answer_plan(&plan)
    }

    /// Answers a `/v1/systemone` request as the reference server does ([`Prompter::plan`]).
    pub fn answer(&self, request: &SystemOneRequest) -> Result<SystemOneResponse, DeciderError> {
        let plan = self.prompter.plan(request)?;
        self.answer_plan(&plan)
    }

    /// Answers planned rows (the server plans first, to check limits before queueing).
    pub fn answer_plan(&self, plan: &Plan) -> Result<SystemOneResponse, DeciderError> {
        Ok(self.respond(plan, &self.slot_probabilities(&plan.rows)?))
    }

    /// The response to `plan` from the probabilities of its slots.
    pub fn respond(&self, plan: &Plan, slot_probabilities: &[Vec<f64>]) -> SystemOneResponse {
        SystemOneResponse {
            model: self.name().to_string(),
            answers: assemble(&plan.questions, slot_probabilities),
            usage: Usage { input_tokens: plan.input_tokens(), output_tokens: 0 },
        }
    }

    /// The option probabilities of every slot of `rows`, in row order, as f64 (from f32); an
    /// error if any slot's logits are not finite.
    pub fn slot_probabilities(&self, rows: &[Row]) -> Result<Vec<Vec<f64>>, DeciderError> {
        self.slot_probabilities_of(&[rows]).pop().expect("one request, one result")
    }

    /// [`Decider::slot_probabilities`] of several requests' rows, scored together (what the
    /// server does with the requests queued at once): a request's rows share their own state
    /// prefix; rows without one, from any request, run in shared batches. One result per request,
    /// so that non-finite logits fail only the request they belong to.
    pub fn slot_probabilities_of(&self, requests: &[&[Row]]) -> Vec<Result<Vec<Vec<f64>>, DeciderError>> {
        requests
            .iter()
            .zip(self.slot_logits_of(requests))
            .map(|(rows, logits)| self.slot_probabilities_from_logits(rows, &logits))
            .collect()
    }

    /// The option probabilities of `rows`' slots from their label logits
    /// ([`Decider::slot_logits`]), as f64 (from f32): each slot's softmax over its options at its
    /// question's temperature; an error if any slot's logits are not finite.
    pub fn slot_probabilities_from_logits(
        &self,
        rows: &[Row],
        logits: &[Vec<f32>],
    ) -> Result<Vec<Vec<f64>>, DeciderError> {
        if let Some(slot) = logits.iter().position(|l| l.iter().any(|x| !x.is_finite())) {
            return Err(DeciderError::NonFinite(format!(
                "the model's label logits at answer slot {slot} (of {}) are NaN or infinite: its weights or backend are broken, so nothing was answered",
                logits.len()
            )));
        }
        let temperatures = self.prompter.slot_temperatures(rows);
        let nopts = rows.iter().flat_map(|r| r.nopts.iter().copied());
        Ok(logits
            .iter()
            .zip(nopts)
            .zip(temperatures)
            .map(|((logits, n), t)| probabilities(logits, n, t).into_iter().map(f64::from).collect())
            .collect())
    }

    /// The 255 label logits at every slot of `rows`, in row order.
    pub fn slot_logits(&self, rows: &[Row]) -> Vec<Vec<f32>> {
        self.slot_logits_of(&[rows]).pop().expect("one request, one result")
    }

    /// The label logits of every slot of several requests' rows, per request in row order.
    fn slot_logits_of(&self, requests: &[&[Row]]) -> Vec<Vec<Vec<f32>>> {
        // Per request and row, the logits of the row's slots, filled as the batches run.
        let mut logits: Vec<Vec<Vec<Vec<f32>>>> = requests.iter().map(|rows| vec![Vec::new(); rows.len()]).collect();
        let schedule = schedule(requests, self.share_prefix);
        for (prefix, rows) in schedule.prefixed {
            // The state prefix runs once; its cache is forked for the rows' continuations.
            let mut cache = self.model.new_cache();
            let hidden = self.model.hidden_states(self.ids(&rows[0].1.ids[..prefix]), &mut cache);
            let prefix = Prefix { len: prefix, cache, hidden };
            for ((r, i), slots) in self.run_rows(&rows, Some(&prefix)) {
                logits[r][i] = slots;
            }
        }
        for ((r, i), slots) in self.run_rows(&schedule.unshared, None) {
            logits[r][i] = slots;
        }
        logits.into_iter().map(|rows| rows.into_iter().flatten().collect()).collect()
    }

    /// The sizes that bound the memory of scoring requests ([`WorkingMemory::bytes`]).
    pub fn working_memory(&self) -> WorkingMemory {
        WorkingMemory { call: self.model.call_memory(), share_prefix: self.share_prefix }
    }

    /// The label logits at every slot of each of `rows` (keyed by the caller), each row run
    /// after `prefix` or from scratch. Rows run in the batches [`batches`] groups them in,
    /// right-padded with id 0: causality keeps the padding from reaching any slot.
    fn run_rows<K: Copy>(&self, rows: &[(K, &Row)], prefix: Option<&Prefix<B>>) -> Vec<(K, Vec<Vec<f32>>)> {
        let start = prefix.map_or(0, |p| p.len);
        let lengths: Vec<usize> = rows.iter().map(|(_, row)| row.ids.len() - start).collect();
        let mut out = Vec::with_capacity(rows.len());
        for group in batches(&lengths, self.share_prefix) {
            let width = group.iter().map(|&i| lengths[i]).max().unwrap_or(0);
            let ids: Vec<i64> = group
                .iter()
                .flat_map(|&i| {
                    rows[i].1.ids[start..].iter().map(|&id| id as i64).chain(std::iter::repeat_n(0, width - lengths[i]))
                })
                .collect();
            let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [group.len(), width]), &self.device);
            let mut cache = prefix.map_or_else(|| self.model.new_cache(), |p| p.cache.repeat_batch(group.len()));
            let hidden = self.model.hidden_states(ids, &mut cache);
            // Each slot's position in this batch's hidden states, or in the prefix's when the
            // slot lies in it.
            let (mut in_batch, mut in_prefix) = (Vec::new(), Vec::new());
            for (b, &i) in group.iter().enumerate() {
                for &slot in &rows[i].1.slots {
                    if slot < start { in_prefix.push(slot) } else { in_batch.push(b * width + slot - start) }
                }
            }
            let mut batch_logits = self.label_logits(hidden, &in_batch).into_iter();
            let mut prefix_logits =
                prefix.map(|p| self.label_logits(p.hidden.clone(), &in_prefix)).unwrap_or_default().into_iter();
            for &i in &group {
                let (key, row) = rows[i];
                let slots =
                    row.slots.iter().map(|&slot| if slot < start { prefix_logits.next() } else { batch_logits.next() });
                out.push((key, slots.map(|l| l.expect("one logit row per slot")).collect()));
            }
        }
        out
    }

    /// The label logits at `positions` of `hidden` (`[rows, len, hidden]`, positions counted
    /// row after row), on the host: a batch's hidden states are freed before the next runs.
    fn label_logits(&self, hidden: Tensor<B, 3>, positions: &[usize]) -> Vec<Vec<f32>> {
        if positions.is_empty() {
            return vec![];
        }
        let [rows, len, width] = hidden.dims();
        let index = Tensor::<B, 1, Int>::from_data(
            TensorData::new(positions.iter().map(|&p| p as i64).collect::<Vec<_>>(), [positions.len()]),
            &self.device,
        );
        let logits = hidden.reshape([rows * len, width]).select(0, index).matmul(self.label_weights.clone());
        let [_, labels] = logits.dims();
        let values = logits.into_data().convert::<f32>().into_vec::<f32>().expect("f32 logits");
        values.chunks(labels).map(<[f32]>::to_vec).collect()
    }

    fn ids(&self, ids: &[u32]) -> Tensor<B, 2, Int> {
        let values: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
        Tensor::from_data(TensorData::new(values, [1, ids.len()]), &self.device)
    }
}

/// A state prefix run once for several rows: its length, the cache after it and its hidden states.
struct Prefix<B: Qwen35Ops> {
    len: usize,
    cache: qwen35::ModelCache<B>,
    hidden: Tensor<B, 3>,
}
