//! `--backend`: the burn backends of this build ([`decider_ops::for_each_backend!`], chosen by
//! decider-ops' cargo features) and the dispatch from a name to a concrete backend type.

use std::ffi::OsStr;
use std::fmt;
use std::sync::OnceLock;

use clap::ValueEnum;
use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::error::{ContextKind, ContextValue};
use qwen35::Qwen35Ops;

/// A backend compiled into this build, by its `--backend` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendName {
    name: &'static str,
    about: &'static str,
}

impl BackendName {
    /// The backends of this build.
    pub fn compiled_in() -> &'static [BackendName] {
        static COMPILED: OnceLock<Vec<BackendName>> = OnceLock::new();
        COMPILED.get_or_init(|| {
            decider_ops::backend_list::compiled_backends()
                .into_iter()
                .map(|(name, about)| BackendName { name, about })
                .collect()
        })
    }

    /// The default `--backend`: the first one compiled in.
    pub fn default_name() -> BackendName {
        *Self::compiled_in()
            .first()
            .expect("this build has no backend: enable one of decider-ops' backend features (ndarray, candle, wgpu)")
    }

    /// `--backend`'s parser: clap's for the backends of this build, whose error for any other
    /// name says how to build one in.
    pub fn parser() -> BackendParser {
        BackendParser
    }
}

#[derive(Clone)]
pub struct BackendParser;

impl TypedValueParser for BackendParser {
    type Value = BackendName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<BackendName, clap::Error> {
        EnumValueParser::<BackendName>::new().parse_ref(cmd, arg, value).map_err(|mut error| {
            let tip = "the backends not listed are not in this build: each is a cargo feature of decider-cli, \
                       built in as `cargo install --path crates/cli --locked --features wgpu` builds wgpu";
            error.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
            error
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(BackendName::compiled_in().iter().filter_map(ValueEnum::to_possible_value)))
    }
}

impl ValueEnum for BackendName {
    fn value_variants<'a>() -> &'a [Self] {
        Self::compiled_in()
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name).help(self.about))
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A computation generic over the backend (closures cannot be generic, so commands implement
/// this and [`dispatch`] picks the type).
pub trait GenericTask {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()>;
}

/// Runs `task` on the backend `backend` with its default device.
pub fn dispatch<T: GenericTask>(backend: BackendName, task: T) -> anyhow::Result<()> {
    macro_rules! run_if_named {
        ($name:ident, $backend:ty, $about:literal) => {
            if backend.name == stringify!($name) {
                return task.run::<$backend>(&Default::default());
            }
        };
    }
    decider_ops::for_each_backend!(run_if_named);
    unreachable!("{backend} is one of the compiled-in backends that for_each_backend! lists")
}
