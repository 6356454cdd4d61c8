//! The inverse on the host, for the CPU backends: forward substitution per matrix, in
//! parallel over the batch.

use num_traits::Float;
use rayon::prelude::*;

/// `(I + strictly_lower(A))^-1` for each of the `a.len() / (n * n)` row-major matrices of `a`.
///
/// Forward substitution by rows: row `i` of `X` is `e_i - sum_{m < i} A[i, m] X[m, ..]`, where
/// row `m` of `X` is zero beyond column `m`; each update is a contiguous axpy.
pub fn unit_lower_inverse<T: Float + Send + Sync>(a: &[T], n: usize) -> Vec<T> {
    let mut x = vec![T::zero(); a.len()];
    if n == 0 {
        return x;
    }
    x.par_chunks_mut(n * n).zip(a.par_chunks(n * n)).for_each(|(x, a)| {
        for i in 0..n {
            let (done, rest) = x.split_at_mut(i * n);
            let row = &mut rest[..n];
            row[i] = T::one();
            for m in 0..i {
                let coefficient = a[i * n + m];
                if coefficient == T::zero() {
                    continue;
                }
                for (target, source) in row[..=m].iter_mut().zip(&done[m * n..m * n + m + 1]) {
                    *target = *target - coefficient * *source;
                }
            }
        }
    });
    x
}
