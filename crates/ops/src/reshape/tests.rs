//! `reshape` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::reshape;
use crate::test_support::*;
use burn::tensor::{Tensor, TensorData};

/// `reshape` of row-major, strided and empty tensors, to fewer and more dimensions: the values in
/// row-major order under the new shape, and the input unchanged by a later op on the output.
fn reshape_keeps_row_major_order<B: Ops>(device: &B::Device) {
    let values: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = Tensor::<B, 3>::from_data(TensorData::new(values.clone(), [2, 3, 4]), device);
    let read = |t: Tensor<B, 2>| -> Vec<f32> { t.into_data().convert::<f32>().to_vec().unwrap() };

    let rows = reshape(x.clone(), [6, 4]);
    assert_eq!(rows.dims(), [6, 4]);
    assert_eq!(read(rows.clone().add_scalar(100.0)), values.iter().map(|v| v + 100.0).collect::<Vec<_>>(), "row-major");
    assert_eq!(
        x.clone().into_data().convert::<f32>().to_vec::<f32>().unwrap(),
        values,
        "the input after an op on its reshape"
    );

    // `swap_dims(0, 1)`: entry [j, i, k] is values[i * 12 + j * 4 + k].
    let swapped: Vec<f32> =
        (0..3).flat_map(|j| (0..2).flat_map(move |i| (0..4).map(move |k| (i * 12 + j * 4 + k) as f32))).collect();
    assert_eq!(read(reshape(x.clone().swap_dims(0, 1), [6, 4])), swapped, "strided");

    let up = reshape(reshape(x, [24]), [4, 3, 2]);
    assert_eq!(up.dims(), [4, 3, 2]);
    assert_eq!(up.into_data().convert::<f32>().to_vec::<f32>().unwrap(), values, "rank 1 to 3");

    let empty = reshape(Tensor::<B, 2>::zeros([0, 4], device), [0, 2, 2]);
    assert_eq!(empty.dims(), [0, 2, 2]);
}

#[cfg(feature = "ndarray")]
#[test]
#[should_panic(expected = "not as many elements")]
fn reshape_to_another_number_of_elements_panics() {
    let x = Tensor::<burn::backend::NdArray, 2>::zeros([2, 3], &Default::default());
    let _ = reshape(x, [4, 2]);
}

/// The point of ndarray's `Reshape`: a row-major array it owns keeps its storage.
#[cfg(feature = "ndarray")]
#[test]
fn ndarray_reshapes_a_row_major_array_in_place() {
    use burn::backend::ndarray::NdArrayTensor;
    type B = burn::backend::NdArray;
    fn address<const D: usize>(t: &Tensor<B, D>) -> usize {
        match t.clone().into_primitive().tensor() {
            NdArrayTensor::F32(storage) => storage.view().as_ptr() as usize,
            _ => panic!("not an f32 tensor"),
        }
    }
    let x = Tensor::<B, 3>::from_data(
        TensorData::new((0..24).map(|v| v as f32).collect::<Vec<_>>(), [2, 3, 4]),
        &Default::default(),
    )
    .add_scalar(1.0);
    let rows = reshape(x.clone(), [6, 4]);
    assert_eq!(address(&rows), address(&x), "reshape copied a row-major array");
    let strided = reshape(x.clone().swap_dims(1, 2), [6, 4]);
    assert_ne!(address(&strided), address(&x), "a strided view must be copied into row-major order");
}

crate::test_support::backend_tests!(reshape_keeps_row_major_order);
