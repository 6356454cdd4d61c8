//! Autodiff: the generic form through autodiff's own ops, on the inner backend's storage.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;

/// The generic form through autodiff's own ops: the gradient reaches `x` (straight through the
/// activations' rounding); the weights (int values and the bits of their scales) have none.
impl<B: crate::Q8Matmul, C: CheckpointStrategy> crate::Q8Matmul for Autodiff<B, C> {
    fn block_storage() -> crate::BlockStorage {
        B::block_storage()
    }
    // The values stay in their order (the default `q8_layout`): the generic form reads them so,
    // whatever order the inner backend's own kernel reads.
}
