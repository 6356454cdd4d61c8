//! The instruction sets the CPU kernels are compiled for, chosen at run time: one build runs on
//! any x86-64 CPU and uses the widest registers the one it runs on has, up to the process's
//! ceiling ([`crate::instructions`]).

use crate::instructions::{Instructions, instruction_ceiling};

/// A kernel variant, by the instructions it is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512F (x86-64).
    Avx512,
    /// AVX2 and FMA (x86-64).
    Avx2,
    /// The target's baseline (SSE2 on x86-64, NEON on aarch64).
    Portable,
}

impl Isa {
    /// Every variant, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// The widest this CPU runs under the process's [`Instructions`] ceiling.
    pub fn best() -> Isa {
        let ceiling = instruction_ceiling();
        Self::ALL.into_iter().find(|isa| isa.family() <= ceiling && isa.available()).expect("the baseline always runs")
    }

    /// Whether this CPU runs it (checked once by the standard library, then cached).
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            Isa::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The family it belongs to.
    pub fn family(self) -> Instructions {
        match self {
            Isa::Avx512 => Instructions::Avx512,
            Isa::Avx2 => Instructions::Avx2,
            Isa::Portable => Instructions::Baseline,
        }
    }
}
