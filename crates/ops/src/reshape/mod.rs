//! Reshaping a float tensor, without a copy where its values are already in row-major order.
//!
//! An extension because burn-ndarray 0.21's `float_reshape` copies every tensor it reshapes
//! (its `reshape!` macro turns the `to_shape` view into an owned array, `NdArrayOps::reshape`):
//! each projection's `[batch, tokens, width] -> [rows, width]` and back copied the activations
//! on the model's single thread, a third of the serial time of a decider-2b decision.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, Tensor, TensorPrimitive, backend::Backend};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Reshape, kernels: ndarray);

/// `reshape` of a float tensor to a shape with as many elements.
pub trait Reshape: Backend {
    /// The values in row-major order under `shape`. The default is [`generic::reshape`], burn's.
    fn reshape(x: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        generic::reshape::<Self>(x, shape)
    }
}

/// `x` under `dims` (row-major order, as burn's `Tensor::reshape`).
///
/// # Panics
/// If `dims` holds another number of elements than `x`.
pub fn reshape<B: Reshape, const D1: usize, const D2: usize>(x: Tensor<B, D1>, dims: [usize; D2]) -> Tensor<B, D2> {
    let from = x.dims();
    assert_eq!(
        from.iter().product::<usize>(),
        dims.iter().product::<usize>(),
        "reshape: {from:?} into {dims:?}: not as many elements"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::reshape(x.into_primitive().tensor(), Shape::from(dims))))
}

/// The generic reshape, burn's: [`Reshape::reshape`]'s default.
pub mod generic {
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{Shape, backend::Backend};

    /// burn's `float_reshape`.
    pub fn reshape<B: Backend>(x: FloatTensor<B>, shape: Shape) -> FloatTensor<B> {
        B::float_reshape(x, shape)
    }
}
