//! What ndarray's kernels share: reading an array's values in place, and making tensors of
//! host values. The kernels are in each op's folder (`q8_matmul/ndarray.rs`, ...).

use burn::backend::ndarray::NdArrayTensor;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorData};

/// Calls `f` on the contiguous values of an ndarray storage (copied only if not in standard
/// layout). Going through `TensorData` instead copies element by element whenever the array is
/// shared, which cost more than the kernels themselves.
macro_rules! with_slice {
    ($storage:expr, |$slice:ident| $body:expr) => {{
        let view = $storage.view();
        let standard = view.as_standard_layout();
        let $slice = standard.as_slice().expect("standard layout is contiguous");
        $body
    }};
}
pub(crate) use with_slice;

/// The expert counts as host numbers (`None` for an int type the kernels do not read).
pub(crate) fn host_counts(counts: &NdArrayTensor) -> Option<Vec<usize>> {
    let count = |c: i64| usize::try_from(c).expect("expert counts are not negative");
    match counts {
        NdArrayTensor::I64(s) => Some(with_slice!(s, |c| c.iter().map(|&c| count(c)).collect())),
        NdArrayTensor::I32(s) => Some(with_slice!(s, |c| c.iter().map(|&c| count(c as i64)).collect())),
        _ => None,
    }
}

/// A float tensor of a backend from row-major f32 values.
pub(crate) fn float_tensor<B: Backend, const D: usize>(values: Vec<f32>, shape: [usize; D]) -> FloatTensor<B> {
    Tensor::<B, D>::from_data(TensorData::new(values, shape), &Default::default()).into_primitive().tensor()
}

/// f32 `values` as a float tensor of any rank.
pub(crate) fn shaped<B: Backend>(values: Vec<f32>, shape: Shape) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(values, shape), &Default::default())
}
