//! The gated delta rule stepped token by token with the state in cache.
//!
//! Each column of a head's state `S` (`dk x dv`) evolves on its own: column `j` reads `v_j` and
//! its own `(Sᵀ k)_j`, and writes only itself. So the state is cut into blocks of
//! [`COLUMNS`] columns (16 KiB at `dk` = 128, inside the L1 cache), and each block runs every
//! token of the sequence before the next: the state never leaves the cache, where the chunked
//! form's matmuls and inverse do several times the work for lengths a CPU sees.

use rayon::prelude::*;

use crate::cpu::Isa;

/// State columns per task.
const COLUMNS: usize = 32;

/// The sizes of a scan: `q`, `k` `[batch, len, heads, dk]`, `v` `[batch, len, heads, dv]`, `g`,
/// `beta` `[batch, len, heads]`, `state` `[batch, heads, dk, dv]`, all row-major.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub batch: usize,
    pub len: usize,
    pub heads: usize,
    pub dk: usize,
    pub dv: usize,
}

/// The gated delta rule with inputs `[q, k, v, g, beta, state]` shaped by `dims`: returns the
/// outputs `[batch, len, heads, dv]` and the final state `[batch, heads, dk, dv]` (see
/// [`crate::GatedDeltaRule`]); in parallel over batch elements, heads and column blocks.
///
/// # Panics
/// If this CPU does not run `isa`.
pub fn gated_delta_rule(inputs: [&[f32]; 6], dims: Dims, isa: Isa) -> (Vec<f32>, Vec<f32>) {
    let [q, k, v, g, beta, state] = inputs;
    let Dims { batch, len, heads, dk, dv } = dims;
    let mut state = state.to_vec();
    let mut out = vec![0f32; batch * len * heads * dv];
    if len == 0 || dk * dv == 0 {
        return (out, state);
    }
    let blocks_per_head = dv.div_ceil(COLUMNS);
    let inputs = Inputs { q, k, v, g, beta, dims };
    // Each task: (its state block [dk, width], its outputs [len, width]).
    let results: Vec<(Vec<f32>, Vec<f32>)> = (0..batch * heads * blocks_per_head)
        .into_par_iter()
        .map(|task| {
            let (bh, first) = (task / blocks_per_head, task % blocks_per_head * COLUMNS);
            let width = COLUMNS.min(dv - first);
            // The block padded with zero columns to the full width: a zero column with a zero
            // `v` stays zero, and its outputs are dropped.
            let mut block = vec![0f32; dk * COLUMNS];
            for (padded, row) in block.chunks_exact_mut(COLUMNS).zip(state[bh * dk * dv..][..dk * dv].chunks_exact(dv))
            {
                padded[..width].copy_from_slice(&row[first..first + width]);
            }
            let mut outputs = vec![0f32; len * width];
            let columns = Columns { batch_index: bh / heads, head: bh % heads, first, width };
            inputs.run(isa, &columns, &mut block, &mut outputs);
            (block, outputs)
        })
        .collect();
    for (task, (block, outputs)) in results.into_iter().enumerate() {
        let (bh, first) = (task / blocks_per_head, task % blocks_per_head * COLUMNS);
        let (b, h, width) = (bh / heads, bh % heads, COLUMNS.min(dv - first));
        for (row, values) in state[bh * dk * dv..][..dk * dv].chunks_exact_mut(dv).zip(block.chunks_exact(COLUMNS)) {
            row[first..first + width].copy_from_slice(&values[..width]);
        }
        for (t, values) in outputs.chunks_exact(width).enumerate() {
            out[((b * len + t) * heads + h) * dv + first..][..width].copy_from_slice(values);
        }
    }
    (out, state)
}

/// The whole scan's inputs.
struct Inputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    g: &'a [f32],
    beta: &'a [f32],
    dims: Dims,
}

/// One task's columns: `first..first + width` of one head's state.
struct Columns {
    batch_index: usize,
    head: usize,
    first: usize,
    width: usize,
}

impl Inputs<'_> {
    /// Runs every token on a block of state columns (`[dk, COLUMNS]`, zero-padded past
    /// `width`), writing its outputs (`[len, width]`): in AVX-512 registers, or the portable
    /// loops compiled for AVX2 or the baseline.
    fn run(&self, isa: Isa, columns: &Columns, state: &mut [f32], out: &mut [f32]) {
        assert!(isa.available(), "this CPU does not run {isa:?}");
        match isa {
            // SAFETY: the CPU has the features (checked above).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { self.run_avx512(columns, state, out) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { self.run_avx2(columns, state, out) },
            _ => self.steps(columns, state, out),
        }
    }

    /// [`Inputs::steps`] in AVX-512 registers: a block row is two registers, and the per-column
    /// sums stay in four (the compiler spills the portable loop's arrays to the stack).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512(&self, columns: &Columns, state: &mut [f32], out: &mut [f32]) {
        use std::arch::x86_64::*;
        const _: () = assert!(COLUMNS == 32, "the AVX-512 steps hold a block row in two registers");
        let Dims { len, heads, dk, dv, .. } = self.dims;
        let width = columns.width;
        assert_eq!(state.len(), dk * COLUMNS);
        let rows = state.as_mut_ptr();
        for (t, out) in out.chunks_exact_mut(width).enumerate() {
            let token = (columns.batch_index * len + t) * heads + columns.head;
            let (q, k) = (&self.q[token * dk..][..dk], &self.k[token * dk..][..dk]);
            let mut v = [0f32; COLUMNS];
            v[..width].copy_from_slice(&self.v[token * dv + columns.first..][..width]);
            let decay = _mm512_set1_ps(self.g[token].exp());
            let (mut p0, mut p1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            for (i, &k_i) in k.iter().enumerate() {
                // SAFETY: row `i < dk` of the `[dk, 32]` block.
                unsafe {
                    let row = rows.add(i * COLUMNS);
                    let (s0, s1) = (
                        _mm512_mul_ps(_mm512_loadu_ps(row), decay),
                        _mm512_mul_ps(_mm512_loadu_ps(row.add(16)), decay),
                    );
                    _mm512_storeu_ps(row, s0);
                    _mm512_storeu_ps(row.add(16), s1);
                    let k_i = _mm512_set1_ps(k_i);
                    p0 = _mm512_fmadd_ps(s0, k_i, p0);
                    p1 = _mm512_fmadd_ps(s1, k_i, p1);
                }
            }
            let beta = _mm512_set1_ps(self.beta[token]);
            // SAFETY: `v` holds 32 values.
            let (v0, v1) = unsafe { (_mm512_loadu_ps(v.as_ptr()), _mm512_loadu_ps(v.as_ptr().add(16))) };
            let (d0, d1) = (_mm512_mul_ps(_mm512_sub_ps(v0, p0), beta), _mm512_mul_ps(_mm512_sub_ps(v1, p1), beta));
            let (mut r0, mut r1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            for (i, (&k_i, &q_i)) in k.iter().zip(q).enumerate() {
                // SAFETY: row `i < dk` of the `[dk, 32]` block.
                unsafe {
                    let row = rows.add(i * COLUMNS);
                    let k_i = _mm512_set1_ps(k_i);
                    let (s0, s1) = (
                        _mm512_fmadd_ps(k_i, d0, _mm512_loadu_ps(row)),
                        _mm512_fmadd_ps(k_i, d1, _mm512_loadu_ps(row.add(16))),
                    );
                    _mm512_storeu_ps(row, s0);
                    _mm512_storeu_ps(row.add(16), s1);
                    let q_i = _mm512_set1_ps(q_i);
                    r0 = _mm512_fmadd_ps(s0, q_i, r0);
                    r1 = _mm512_fmadd_ps(s1, q_i, r1);
                }
            }
            let mut read = [0f32; COLUMNS];
            // SAFETY: `read` holds 32 values.
            unsafe {
                _mm512_storeu_ps(read.as_mut_ptr(), r0);
                _mm512_storeu_ps(read.as_mut_ptr().add(16), r1);
            }
            out.copy_from_slice(&read[..width]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, columns: &Columns, state: &mut [f32], out: &mut [f32]) {
        self.steps(columns, state, out)
    }

    /// Per token: one pass over the block decays it and predicts `Sᵀ k`; a second adds
    /// `k (beta (v - Sᵀ k))ᵀ` and reads out `Sᵀ q`. The portable form, for CPUs without
    /// AVX-512.
    #[inline(always)]
    fn steps(&self, columns: &Columns, state: &mut [f32], out: &mut [f32]) {
        let Dims { len, heads, dk, dv, .. } = self.dims;
        let width = columns.width;
        for (t, out) in out.chunks_exact_mut(width).enumerate() {
            let token = (columns.batch_index * len + t) * heads + columns.head;
            let (q, k) = (&self.q[token * dk..][..dk], &self.k[token * dk..][..dk]);
            let mut v = [0f32; COLUMNS];
            v[..width].copy_from_slice(&self.v[token * dv + columns.first..][..width]);
            let decay = self.g[token].exp();
            let mut predicted = [0f32; COLUMNS];
            for (row, &k_i) in state.chunks_exact_mut(COLUMNS).zip(k) {
                for (s, p) in row.iter_mut().zip(predicted.iter_mut()) {
                    *s *= decay;
                    *p += *s * k_i;
                }
            }
            let delta: [f32; COLUMNS] = std::array::from_fn(|j| (v[j] - predicted[j]) * self.beta[token]);
            let mut read = [0f32; COLUMNS];
            for ((row, &k_i), &q_i) in state.chunks_exact_mut(COLUMNS).zip(k).zip(q) {
                for ((s, &d), o) in row.iter_mut().zip(&delta).zip(read.iter_mut()) {
                    *s += k_i * d;
                    *o += *s * q_i;
                }
            }
            out.copy_from_slice(&read[..width]);
        }
    }
}
