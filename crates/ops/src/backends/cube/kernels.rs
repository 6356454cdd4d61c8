//! CubeCL kernels. This module imports only the cubecl prelude: next to burn's `Tensor`/`Int`,
//! the `#[cube]` macro would pick up the wrong types.

use cubecl::prelude::*;

/// One unit per id: `counts[id] += 1` for `0 <= id < counts.shape(0)`; other ids are dropped.
///
/// `I` is the dtype of the ids and `C` the dtype of the counts, both defined at launch time from
/// the tensors' runtime dtypes.
#[cube(launch)]
pub fn expert_count_kernel<I: Int, C: Int>(
    ids: &Tensor<I>,
    counts: &mut Tensor<Atomic<C>>,
    #[define(I, C)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= ids.shape(0) {
        terminate!();
    }
    let id = ids[ABSOLUTE_POS * ids.stride(0)];
    if id >= I::new(0) {
        let expert = usize::cast_from(id);
        if expert < counts.shape(0) {
            counts[expert * counts.stride(0)].fetch_add(C::new(1));
        }
    }
}

/// `X = (I + strictly_lower(A))^-1` for a batch `[batch, n, n]`: one cube per matrix, one unit
/// per column `j`, the matrix in shared memory.
///
/// Column `j` of `X` only depends on column `j` of `X` and the rows of `A`:
/// `X[i, j] = -(A[i, j] + sum_{j < k < i} A[i, k] X[k, j])` for `i > j`. Row by row, each unit
/// reads row `i` of `A` and its own column of `X`, the cube syncs, and each unit overwrites
/// `A[i, j]` (no longer read by anyone) with `X[i, j]`. `F` is the tensor dtype, `A` the
/// accumulation dtype (f32, or f64 for f64 input).
#[cube(launch)]
pub fn unit_lower_inverse_kernel<F: Float, A: Float>(
    a: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] n: usize,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    // Clamp instead of `terminate!()`: when the cube count is spread over x/y and rounded up,
    // the extra cubes redo the last matrix (writing identical values) and every unit of every
    // cube reaches the same `sync_cube` calls.
    let batches = out.shape(0);
    let mut batch = CUBE_POS;
    if batch >= batches {
        batch = batches - 1;
    }
    let j = UNIT_POS_X as usize;
    let mut s = SharedMemory::<A>::new(n * n);

    let a_base = batch * a.stride(0);
    let a_row = a.stride(1);
    let a_col = a.stride(2);
    for r in 0..n {
        s[r * n + j] = A::cast_from(a[a_base + r * a_row + j * a_col]);
    }
    sync_cube();

    for i in 1..n {
        let mut acc = A::new(0.0);
        if j < i {
            acc = s[i * n + j];
            for k in j + 1..i {
                acc += s[i * n + k] * s[k * n + j];
            }
        }
        sync_cube();
        if j < i {
            s[i * n + j] = -acc;
        }
    }

    // Unit j only reads back column j below the diagonal, which it wrote itself.
    let o_base = batch * out.stride(0);
    let o_row = out.stride(1);
    let o_col = out.stride(2);
    for r in 0..n {
        let mut value = A::new(0.0);
        if r == j {
            value = A::new(1.0);
        } else if r > j {
            value = s[r * n + j];
        }
        out[o_base + r * o_row + j * o_col] = F::cast_from(value);
    }
}
