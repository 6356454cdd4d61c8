//! The burn backends of this build, chosen by cargo feature, and the dispatch from `--backend`
//! to a concrete backend type. This is the only place in the binary that names a backend;
//! a new backend is a feature, a variant here and an arm in [`dispatch`].

use std::fmt;

use clap::ValueEnum;
use qwen35::Qwen35Ops;

/// The backends compiled into this build (clap lists them for `--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    /// Pure-Rust CPU backend (feature `ndarray`, the default).
    #[cfg(feature = "ndarray")]
    Ndarray,
    /// candle's CPU backend (feature `candle`).
    #[cfg(feature = "candle")]
    Candle,
    /// WebGPU through wgpu on the default adapter: Vulkan, Metal or DX12 (feature `wgpu`; `vulkan`
    /// and `metal` compile shaders to SPIR-V / MSL instead of WGSL).
    #[cfg(feature = "wgpu")]
    Wgpu,
}

impl BackendName {
    /// The backends of this build.
    pub fn compiled_in() -> &'static [BackendName] {
        Self::value_variants()
    }

    /// The default `--backend`: the first one compiled in.
    pub fn default_name() -> BackendName {
        *Self::compiled_in().first().expect("build with at least one backend feature (e.g. --features ndarray)")
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.to_possible_value().expect("no skipped variants").get_name())
    }
}

/// A computation generic over the backend (closures cannot be generic, so commands implement
/// this and [`dispatch`] picks the type).
pub trait GenericTask {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()>;
}

/// Runs `task` on the backend `name` with its default device.
pub fn dispatch<T: GenericTask>(name: BackendName, task: T) -> anyhow::Result<()> {
    match name {
        #[cfg(feature = "ndarray")]
        BackendName::Ndarray => task.run::<burn::backend::NdArray>(&Default::default()),
        #[cfg(feature = "candle")]
        #[allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still supported here.
        BackendName::Candle => task.run::<burn::backend::Candle>(&Default::default()),
        #[cfg(feature = "wgpu")]
        BackendName::Wgpu => task.run::<burn::backend::Wgpu>(&Default::default()),
    }
}
