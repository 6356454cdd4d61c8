#![doc = include_str!("../README.md")]

pub mod answer;
pub mod batch;
pub mod config;
pub mod decide_form;
pub mod demo;
pub mod engine;
pub mod error;
pub mod gguf_tokenizer;
pub mod plan_budget;
pub mod prompt;
pub mod prompter;
pub mod python_json;
pub mod question;
pub mod readout;
mod schedule;
pub mod state;
pub mod tokenizer;
pub mod wire;
pub mod working_memory;

pub use answer::{Answer, LevelFit};
pub use config::DeciderConfig;
pub use decide_form::{DECIDE_MAX_CONTEXT_TOKENS, FieldAnswer, FormAnswers};
pub use engine::Decider;
pub use error::DeciderError;
pub use plan_budget::{Meter, PlanBudget};
pub use prompt::{Plan, PlanOptions, Row};
pub use prompter::Prompter;
pub use question::{AnswerType, RenderedQuestion};
/// The backend bound of [`Decider`]: the one the Qwen3.5 layers need.
pub use qwen35::Qwen35Ops;
pub use tokenizer::{LabelTable, Tokenizer};
pub use wire::{DecideAnswer, DecideQuestion, SystemOneRequest, SystemOneResponse, Usage};
pub use working_memory::WorkingMemory;
