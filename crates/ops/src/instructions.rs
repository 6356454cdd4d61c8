//! The ceiling on the instructions the CPU kernels may use: by default everything the CPU has,
//! lowered once for a process ([`limit_instructions`], `decider --cpu-kernels`) to compare
//! kernels, or to run the fallbacks on a CPU that has more (the tests of the fallbacks do).

use std::sync::OnceLock;

/// The instruction families a kernel may come from, narrowest first: a ceiling on the run-time
/// choice of each of this crate's CPU kernels (the bf16 and integer products, the few-row f32
/// products, the delta rule). `matrixmultiply`'s sgemm picks its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Instructions {
    /// The target's baseline: the portable kernels and sgemm on widened or dequantized panels.
    Baseline,
    /// AVX2 and FMA (the AVX2 integer dot; no bf16 dot).
    Avx2,
    /// AVX-512 with its extensions (VNNI, BF16) where the CPU has them: everything this build
    /// has kernels for.
    #[default]
    Avx512,
}

impl Instructions {
    /// Every family, by the name `--cpu-kernels` takes, narrowest first.
    pub const ALL: [(&'static str, Instructions); 3] =
        [("baseline", Instructions::Baseline), ("avx2", Instructions::Avx2), ("avx512", Instructions::Avx512)];

    /// Its name in [`Instructions::ALL`].
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, family)| *family == self).map(|(name, _)| *name).expect("every family is listed")
    }
}

static CEILING: OnceLock<Instructions> = OnceLock::new();

/// The ceiling in force: the one [`limit_instructions`] set, else every family.
pub fn instruction_ceiling() -> Instructions {
    *CEILING.get_or_init(Instructions::default)
}

/// Keeps every kernel of this process within `ceiling`. Call it before any product runs or any
/// block-format weight is laid out (the layout follows the kernel): once the ceiling has been
/// read or set, a different one is refused.
pub fn limit_instructions(ceiling: Instructions) -> Result<(), String> {
    match *CEILING.get_or_init(|| ceiling) {
        set if set == ceiling => Ok(()),
        set => Err(format!("the CPU kernels are already limited to {} (set before any product runs)", set.name())),
    }
}
