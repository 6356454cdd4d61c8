//! burn-cubecl (wgpu WGSL/SPIR-V, Metal, CUDA, ROCm): an atomic histogram, one unit per id.

use burn::tensor::ops::IntTensor;
use burn::tensor::{Int, Shape, Tensor};
use burn_cubecl::ops::numeric::zeros_client;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::features::AtomicUsage;
use cubecl::prelude::{StorageType, Type};
use cubecl::{CubeDim, calculate_cube_count_elemwise};

use crate::ExpertCount;

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
            return super::generic::expert_count(ids, num_experts).into_primitive();
        }

        let counts = zeros_client::<R>(client.clone(), ids.device.clone(), Shape::new([num_experts]), count_dtype);
        let cube_dim = CubeDim::new(&client, len);
        let cube_count = calculate_cube_count_elemwise(&client, len, cube_dim);
        let dtypes: [StorageType; 2] = [ids.dtype.into(), count_dtype.into()];
        kernel::expert_count_kernel::launch::<R>(
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

/// The CubeCL kernel. This module imports only the cubecl prelude: next to burn's `Tensor`/`Int`,
/// the `#[cube]` macro would pick up the wrong types.
mod kernel {
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
}
