//! Which backends get which implementation. A specialised kernel is an override of the trait
//! method in that backend's `impl`; a backend without one uses the generic default.

/// `impl<GENERICS> Op for BACKEND {}` for every op listed: the backend takes each op's default
/// (its generic form, which the op's trait describes). `autodiff: OPS` is the same for
/// `Autodiff<B, C>` over an inner backend `B` that has the op. One line per backend, where each
/// such impl was a line of its own.
macro_rules! generic_forms {
    (@one [$($generics:tt)*] $backend:ty, $op:path) => {
        impl<$($generics)*> $op for $backend {}
    };
    (autodiff: $($op:path),+ $(,)?) => {
        $(impl<B: $op, C: CheckpointStrategy> $op for Autodiff<B, C> {})+
    };
    ($generics:tt $backend:ty: $($op:path),+ $(,)?) => {
        $(generic_forms!(@one $generics $backend, $op);)+
    };
}

#[cfg(feature = "autodiff")]
mod autodiff;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "wgpu")]
mod cube;
#[cfg(feature = "wgpu")]
mod fusion;
#[cfg(feature = "ndarray")]
mod ndarray;
