//! burn-cubecl (wgpu WGSL/SPIR-V, Metal, CUDA, ROCm, CubeCL CPU): CubeCL kernels.

mod kernels;

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Shape, Tensor, TensorPrimitive};
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::features::AtomicUsage;
use cubecl::prelude::{StorageType, Type};
use cubecl::server::CubeCountSelection;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

use crate::{ExpertCount, UnitLowerInverse, generic};

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> ExpertCount for CubeBackend<R, F, I, BT> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let client = ids.client.clone();
        // Counts in the backend's int dtype, like the generic default (`Tensor::zeros`).
        let count_dtype = I::dtype();
        let atomic_add = client
            .properties()
            .atomic_type_usage(Type::new(StorageType::Atomic(count_dtype.into())))
            .contains(AtomicUsage::Add);
        let len = ids.meta.num_elements();
        if !atomic_add || num_experts == 0 || len == 0 {
            let ids = Tensor::<Self, 1, Int>::from_primitive(ids);
            return generic::expert_count(ids, num_experts).into_primitive();
        }

        let counts = zeros_client::<R>(client.clone(), ids.device.clone(), Shape::new([num_experts]), count_dtype);
        let cube_dim = CubeDim::new(&client, len);
        let cube_count = calculate_cube_count_elemwise(&client, len, cube_dim);
        let dtypes: [StorageType; 2] = [ids.dtype.into(), count_dtype.into()];
        kernels::expert_count_kernel::launch::<R>(
            &client,
            cube_count,
            cube_dim,
            ids.into_tensor_arg(),
            counts.clone().into_tensor_arg(),
            dtypes,
        );
        counts
    }
}

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
            return generic::unit_lower_inverse(a).into_primitive().tensor();
        }

        let out = empty_device_dtype::<R>(client.clone(), a.device.clone(), a.meta.shape().clone(), dtype);
        let cube_count = CubeCountSelection::new(&client, batch as u32).cube_count();
        let cube_dim = CubeDim::new_1d(n as u32);
        let dtypes: [StorageType; 2] = [dtype.into(), acc_dtype.into()];
        kernels::unit_lower_inverse_kernel::launch::<R>(
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

// The generic forms: the block and 16-bit products dequantize, then run burn's matmul kernels; the
// chunked delta rule runs its matmuls and the inverse kernel above; the gates, the reshape (a
// contiguous handle is reshaped in place) and the conv are burn's ops.
generic_forms!([R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement] CubeBackend<R, F, I, BT>:
    crate::Q8Matmul, crate::Q4Matmul, crate::HalfMatmul, crate::DenseMatmul, crate::GatedDeltaRule, crate::Gating,
    crate::Reshape, crate::CausalConv1d,
);
