//! The backend extensions' suites in one test binary: every kernel against the generic form and
//! plain loops on every backend, and the gradients of the ops with a backward of their own.

mod gradients;
mod kernels;
