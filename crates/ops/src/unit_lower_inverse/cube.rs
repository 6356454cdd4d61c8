//! burn-cubecl (wgpu WGSL/SPIR-V, Metal, CUDA, ROCm): one cube per matrix in shared memory, one
//! unit per column.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::CubeDim;
use cubecl::prelude::StorageType;
use cubecl::server::CubeCountSelection;

use crate::UnitLowerInverse;

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> UnitLowerInverse for CubeBackend<R, F, I, BT> {
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let [batch, n, _] = a.meta.shape().dims::<3>();
        let client = a.client.clone();
        let dtype = a.dtype;
        let acc_dtype = match dtype {
            DType::F64 => DType::F64,
            _ => DType::F32,
        };
        let hardware = &client.properties().hardware;
        let fits = n <= hardware.max_cube_dim.0 as usize
            && n <= hardware.max_units_per_cube as usize
            && n * n * acc_dtype.size() <= hardware.max_shared_memory_size;
        if batch == 0 || n == 0 || !fits {
            let a = Tensor::<Self, 3>::from_primitive(TensorPrimitive::Float(a));
            return super::generic::unit_lower_inverse(a).into_primitive().tensor();
        }

        let out = empty_device_dtype::<R>(client.clone(), a.device.clone(), a.meta.shape().clone(), dtype);
        let cube_count = CubeCountSelection::new(&client, batch as u32).cube_count();
        let cube_dim = CubeDim::new_1d(n as u32);
        let dtypes: [StorageType; 2] = [dtype.into(), acc_dtype.into()];
        kernel::unit_lower_inverse_kernel::launch::<R>(
            &client,
            cube_count,
            cube_dim,
            a.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            n,
            dtypes,
        );
        out
    }
}

/// The CubeCL kernel. This module imports only the cubecl prelude: next to burn's `Tensor`/`Int`,
/// the `#[cube]` macro would pick up the wrong types.
mod kernel {
    use cubecl::prelude::*;

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
}
