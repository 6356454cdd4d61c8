//! The burn backends of this build, chosen by decider-ops' cargo features: the one list that the
//! CLI's `--backend`, the backend test suites and the benches are made from.
//!
//! A new backend is a feature in this crate's manifest, a type, a gate and one line in
//! [`for_each_backend!`] below, and its rules in `backends/mod.rs`'s `generic_forms!` (which
//! gives it every op's generic form); a kernel of its own is then a file in that op's folder. The features are decider-ops' own and cargo
//! unifies them across a build, so a crate that calls [`for_each_backend!`] needs no `cfg` of
//! its own: `--features decider-ops/candle` anywhere adds candle everywhere.

/// Pure-Rust CPU backend.
#[cfg(feature = "ndarray")]
pub type NdArray = burn::backend::NdArray;
/// candle's CPU backend.
#[cfg(feature = "candle")]
#[allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still a supported backend here.
pub type Candle = burn::backend::Candle;
/// WebGPU through wgpu on the default adapter: Vulkan, Metal or DX12 (features `vulkan` and
/// `metal` compile shaders to SPIR-V / MSL instead of WGSL).
#[cfg(feature = "wgpu")]
pub type Wgpu = burn::backend::Wgpu;

/// Expands `$callback! { name, Backend, "what it is" }` once for every backend compiled into
/// this build, in order of preference (the first is the default `--backend`); `name` is the
/// backend's `--backend` spelling, an identifier that can also name a module or a test. Tokens
/// after the callback's name are passed on after the description
/// (`for_each_backend!(suite, a, b)` expands `suite! { name, Backend, "what it is", a, b }`).
///
/// ```
/// macro_rules! print_name {
///     ($name:ident, $backend:ty, $about:literal) => {
///         println!("{}: {}", stringify!($name), $about);
///     };
/// }
/// decider_ops::for_each_backend!(print_name);
/// ```
#[macro_export]
macro_rules! for_each_backend {
    ($callback:ident $($extra:tt)*) => {
        $crate::__if_ndarray! { $callback! { ndarray, $crate::backend_list::NdArray, "pure-Rust CPU backend" $($extra)* } }
        $crate::__if_candle! { $callback! { candle, $crate::backend_list::Candle, "candle's CPU backend" $($extra)* } }
        $crate::__if_wgpu! { $callback! { wgpu, $crate::backend_list::Wgpu, "WebGPU on the default adapter (Vulkan, Metal, DX12)" $($extra)* } }
    };
}

/// `(name, what it is)` of every backend compiled in, in [`for_each_backend!`]'s order.
#[cfg_attr(
    not(any(feature = "ndarray", feature = "candle", feature = "wgpu")),
    allow(unused_mut, unused_macros, reason = "a build of no backend has an empty list")
)]
pub fn compiled_backends() -> Vec<(&'static str, &'static str)> {
    let mut backends = Vec::new();
    macro_rules! push {
        ($name:ident, $backend:ty, $about:literal) => {
            backends.push((stringify!($name), $about));
        };
    }
    crate::for_each_backend!(push);
    backends
}

// The gates: each keeps its tokens when its feature is on in decider-ops (a `cfg` written inside
// `for_each_backend!` would read the calling crate's features instead).

#[cfg(feature = "ndarray")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_ndarray {
    ($($tokens:tt)*) => { $($tokens)* };
}
#[cfg(not(feature = "ndarray"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_ndarray {
    ($($tokens:tt)*) => {};
}

#[cfg(feature = "candle")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_candle {
    ($($tokens:tt)*) => { $($tokens)* };
}
#[cfg(not(feature = "candle"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_candle {
    ($($tokens:tt)*) => {};
}

#[cfg(feature = "wgpu")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_wgpu {
    ($($tokens:tt)*) => { $($tokens)* };
}
#[cfg(not(feature = "wgpu"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_wgpu {
    ($($tokens:tt)*) => {};
}
