//! Which backends get which implementation. A specialised kernel is an override of the trait
//! method in that backend's `impl`; a backend without one uses the generic default.

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
