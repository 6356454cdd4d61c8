//! The weight format asked for at load, `auto` included, and how `auto` is settled for a model
//! folder.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::checkpoint::Checkpoint;
use crate::error::LoadError;
use crate::weight_format::{FormatOps, WeightFormat};

/// The weight format asked for at load: one format, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightChoice {
    /// The best format that holds a model folder's weights exactly: the format a `decider
    /// quantize`d folder is stored in; else the 16-bit float a checkpoint's matrices are all
    /// stored in (the released checkpoints: bf16), where the backend holds it in 2 bytes a
    /// weight ([`WeightFormat::half_bytes`]; not bf16 on wgpu); else f32. As transformers'
    /// `torch_dtype="auto"`: the checkpoint's own precision, in half f32's memory.
    #[default]
    Auto,
    Exactly(WeightFormat),
}

impl WeightChoice {
    /// The format to load the model folder `dir` in on `device`.
    pub fn for_folder<B: FormatOps>(self, dir: &Path, device: &B::Device) -> Result<WeightFormat, LoadError> {
        match self {
            WeightChoice::Auto => Ok(self.for_checkpoint::<B>(&Checkpoint::open_dir(dir)?, device)),
            WeightChoice::Exactly(format) => Ok(format),
        }
    }

    /// The format to load `checkpoint` in on `device`.
    pub fn for_checkpoint<B: FormatOps>(self, checkpoint: &Checkpoint, device: &B::Device) -> WeightFormat {
        let WeightChoice::Auto = self else {
            return self.without_folder();
        };
        if let Some(format) = checkpoint.stored_format() {
            return format;
        }
        let half = checkpoint.matrices_half().filter(|&half| WeightFormat::half_bytes::<B>(half, device) == 2);
        half.map_or(WeightFormat::F32, WeightFormat::of_half)
    }

    /// The format of a model built without a folder (random weights).
    pub fn without_folder(self) -> WeightFormat {
        match self {
            WeightChoice::Exactly(format) => format,
            WeightChoice::Auto => WeightFormat::F32,
        }
    }
}

impl From<WeightFormat> for WeightChoice {
    fn from(format: WeightFormat) -> Self {
        WeightChoice::Exactly(format)
    }
}

impl fmt::Display for WeightChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightChoice::Auto => f.write_str("auto"),
            WeightChoice::Exactly(format) => format.fmt(f),
        }
    }
}

impl FromStr for WeightChoice {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            _ if name.eq_ignore_ascii_case("auto") => Ok(WeightChoice::Auto),
            _ => name.parse().map(WeightChoice::Exactly).map_err(|_| {
                let names: Vec<&str> = WeightFormat::ALL.iter().map(|(name, _)| *name).collect();
                format!("unknown weight format `{name}` (expected one of: auto, {})", names.join(", "))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WeightChoice;
    use crate::weight_format::WeightFormat;

    #[test]
    fn choices_parse_and_print_by_their_names() {
        for (name, choice) in [
            ("auto", WeightChoice::Auto),
            ("f32", WeightChoice::Exactly(WeightFormat::F32)),
            ("q8", WeightChoice::Exactly(WeightFormat::Q8)),
            ("q4", WeightChoice::Exactly(WeightFormat::Q4)),
            ("f16", WeightChoice::Exactly(WeightFormat::F16)),
            ("bf16", WeightChoice::Exactly(WeightFormat::Bf16)),
            ("q4_k", WeightChoice::Exactly(WeightFormat::Q4K)),
        ] {
            assert_eq!(name.parse::<WeightChoice>(), Ok(choice));
            assert_eq!(choice.to_string(), name);
        }
        let names: Vec<&str> = WeightFormat::ALL.iter().map(|(name, _)| *name).collect();
        assert!(names.starts_with(&["f32", "q8", "q4", "f16", "bf16"]), "the formats keep their names and order");
        assert_eq!(
            "q3".parse::<WeightChoice>(),
            Err(format!("unknown weight format `q3` (expected one of: auto, {})", names.join(", ")))
        );
        assert_eq!(WeightChoice::Auto.without_folder(), WeightFormat::F32);
    }

    #[test]
    fn llama_cpp_names_and_any_case_are_read() {
        for (name, format) in [("q8_0", WeightFormat::Q8), ("Q8_0", WeightFormat::Q8), ("Q4_0", WeightFormat::Q4)] {
            assert_eq!(name.parse::<WeightChoice>(), Ok(WeightChoice::Exactly(format)), "{name}");
        }
        for (name, format) in [("BF16", WeightFormat::Bf16), ("Q8", WeightFormat::Q8), ("F32", WeightFormat::F32)] {
            assert_eq!(name.parse::<WeightChoice>(), Ok(WeightChoice::Exactly(format)), "{name}");
        }
        assert_eq!("AUTO".parse::<WeightChoice>(), Ok(WeightChoice::Auto));
        assert!("q8_1".parse::<WeightChoice>().is_err(), "only the layouts that are ours");
    }
}
