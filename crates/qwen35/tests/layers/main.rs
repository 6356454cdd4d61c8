//! The layers' suites in one test binary: the gated delta rule's forms, its gradients, and the
//! RMSNorms.

mod delta_rule;
mod gradients;
mod norm;
