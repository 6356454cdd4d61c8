//! The backends' side of the ops: what each backend's kernels share (`ndarray.rs`,
//! `candle.rs`), and [`generic_forms!`], which gives every backend without a kernel of its own
//! an op's generic form. The kernels themselves live in their op's folder, one file per backend
//! (`q8_matmul/ndarray.rs`, `expert_count/cube.rs`, ...).

#[cfg(feature = "candle")]
pub(crate) mod candle;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

/// `generic_forms!(Op, kernels: ndarray, candle)`, written once in an op's `mod.rs`: every
/// backend of the crate not named among `kernels` implements `Op` with its default methods, the
/// op's generic form (an empty `impl`); the named ones implement it in the op's folder
/// (`ndarray.rs`, `candle.rs`, `cube.rs`, `fusion.rs`, `autodiff.rs`). Each backend is one line
/// in the first rule and two rules below (its own name ends the search: it has a kernel; the
/// end of the list: it takes the default).
///
/// `Fusion<B>` and `Autodiff<B, C>` take the default over an inner backend that has the op.
macro_rules! generic_forms {
    ($op:ident, kernels: $($kernel:ident),* $(,)?) => {
        $crate::backends::generic_forms!(@ndarray $op; $($kernel)*);
        $crate::backends::generic_forms!(@candle $op; $($kernel)*);
        $crate::backends::generic_forms!(@cube $op; $($kernel)*);
        $crate::backends::generic_forms!(@fusion $op; $($kernel)*);
        $crate::backends::generic_forms!(@autodiff $op; $($kernel)*);
    };

    (@ndarray $op:ident; ndarray $($rest:ident)*) => {};
    (@ndarray $op:ident;) => {
        #[cfg(feature = "ndarray")]
        impl<
            E: burn::backend::ndarray::FloatNdArrayElement,
            I: burn::backend::ndarray::IntNdArrayElement,
            Q: burn::backend::ndarray::QuantElement,
        > $op for burn::backend::NdArray<E, I, Q>
        where
            burn::backend::ndarray::NdArrayTensor: From<burn::backend::ndarray::SharedArray<E>>
                + From<burn::backend::ndarray::SharedArray<I>>,
        {
        }
    };

    (@candle $op:ident; candle $($rest:ident)*) => {};
    (@candle $op:ident;) => {
        #[cfg(feature = "candle")]
        #[allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still a supported backend here.
        impl<F: burn::backend::candle::FloatCandleElement, I: burn::backend::candle::IntCandleElement> $op
            for burn::backend::Candle<F, I>
        {
        }
    };

    (@cube $op:ident; cube $($rest:ident)*) => {};
    (@cube $op:ident;) => {
        #[cfg(feature = "wgpu")]
        impl<
            R: burn_cubecl::CubeRuntime,
            F: burn_cubecl::FloatElement,
            I: burn_cubecl::IntElement,
            BT: burn_cubecl::BoolElement,
        > $op for burn_cubecl::CubeBackend<R, F, I, BT>
        {
        }
    };

    (@fusion $op:ident; fusion $($rest:ident)*) => {};
    (@fusion $op:ident;) => {
        #[cfg(feature = "wgpu")]
        impl<B: burn_fusion::FusionBackend + $op> $op for burn_fusion::Fusion<B> {}
    };

    (@autodiff $op:ident; autodiff $($rest:ident)*) => {};
    (@autodiff $op:ident;) => {
        #[cfg(feature = "autodiff")]
        impl<B: $op, C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy> $op
            for burn::backend::Autodiff<B, C>
        {
        }
    };

    // Another backend's name: search on.
    (@$backend:ident $op:ident; $other:ident $($rest:ident)*) => {
        $crate::backends::generic_forms!(@$backend $op; $($rest)*);
    };
}
pub(crate) use generic_forms;
