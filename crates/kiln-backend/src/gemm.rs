//! f32 matrix products for the encoder ops.
//!
//! Encoders run every token of a batch through every weight at once, so their linear
//! layers are true matrix-matrix products (hundreds to thousands of rows), unlike a
//! decoder step. A packed, register-blocked GEMM (`matrixmultiply`, with runtime-detected
//! AVX2/FMA and AVX-512 kernels) is several times faster there than one dot product per
//! output, so this module wraps it behind bounds-checked strided views (`crate::dense`
//! splits the rows of a layer over the worker pool, `crate::encoder_attention` runs a
//! head's two products through it).

/// A read-only `rows × cols` matrix inside a slice: element `(r, c)` is
/// `data[r * row_stride + c * col_stride]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A contiguous row-major matrix.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// A matrix with explicit strides (e.g. one head's columns of a wider row).
    ///
    /// # Panics
    ///
    /// If an element lies outside `data`: shapes come from the model definition, so this
    /// is an internal bug, and the check is what makes the GEMM call sound.
    pub fn strided(
        data: &'a [f32],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        assert!(
            fits(data.len(), rows, cols, row_stride, col_stride),
            "gemm: {rows}x{cols} view with strides ({row_stride}, {col_stride}) exceeds {} elements",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }

    /// The transpose, as a view of the same data (no copy).
    pub fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }
}

/// A writable `rows × cols` matrix inside a slice, columns contiguous.
#[derive(Debug)]
pub(crate) struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a> MatMut<'a> {
    /// A contiguous row-major matrix.
    pub fn new(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols)
    }

    /// Rows `row_stride` apart, `cols` contiguous elements each.
    ///
    /// # Panics
    ///
    /// As [`MatRef::strided`], if an element lies outside `data`.
    pub fn strided(data: &'a mut [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        assert!(
            fits(data.len(), rows, cols, row_stride, 1) && (rows <= 1 || cols <= row_stride),
            "gemm: {rows}x{cols} output with row stride {row_stride} exceeds {} elements or overlaps",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
        }
    }
}

/// Whether the last element of a `rows × cols` strided view lies inside `len` elements.
fn fits(len: usize, rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let last = (rows - 1)
        .checked_mul(row_stride)
        .zip((cols - 1).checked_mul(col_stride))
        .and_then(|(a, b)| a.checked_add(b));
    last.is_some_and(|l| l < len) && isize::try_from(len).is_ok()
}

/// `c = alpha · a · b` on the calling thread.
///
/// # Panics
///
/// If the shapes disagree (an internal bug).
pub(crate) fn gemm(alpha: f32, a: MatRef<'_>, b: MatRef<'_>, c: MatMut<'_>) {
    assert!(
        a.cols == b.rows && a.rows == c.rows && b.cols == c.cols,
        "gemm: ({}x{}) · ({}x{}) into {}x{}",
        a.rows,
        a.cols,
        b.rows,
        b.cols,
        c.rows,
        c.cols
    );
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for r in 0..m {
            c.data[r * c.row_stride..r * c.row_stride + n].fill(0.0);
        }
        return;
    }
    // Strides fit in isize: `fits` bounded every offset by a slice length, which is.
    let s = |v: usize| v as isize;
    // SAFETY: every view was checked by `fits` to keep all its elements inside its slice,
    // the strides are the views' own, and `c` is borrowed mutably so it aliases neither
    // input; with beta = 0 the output's previous contents are not read.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            s(a.row_stride),
            s(a.col_stride),
            b.data.as_ptr(),
            s(b.row_stride),
            s(b.col_stride),
            0.0,
            c.data.as_mut_ptr(),
            s(c.row_stride),
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn gemm_matches_naive_with_transposed_and_strided_views() {
        let (m, k, n) = (7, 13, 5);
        let a = data(m * k, 1);
        let b = data(k * n, 2);
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![0f32; m * n];
        gemm(
            1.0,
            MatRef::new(&a, m, k),
            MatRef::new(&b, k, n),
            MatMut::new(&mut c, m, n),
        );
        for (x, y) in c.iter().zip(&want) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
        // bᵀ stored row-major, viewed transposed, written into every other column pair.
        let mut bt = vec![0f32; n * k];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = b[p * n + j];
            }
        }
        let mut wide = vec![0f32; m * 2 * n];
        gemm(
            2.0,
            MatRef::new(&a, m, k),
            MatRef::new(&bt, n, k).t(),
            MatMut::strided(&mut wide[n..], m, n, 2 * n),
        );
        for i in 0..m {
            for j in 0..n {
                assert!((wide[i * 2 * n + n + j] - 2.0 * want[i * n + j]).abs() < 1e-5);
                assert_eq!(wide[i * 2 * n + j], 0.0);
            }
        }
    }

    #[test]
    #[should_panic(expected = "exceeds")]
    fn out_of_bounds_views_are_refused() {
        let a = [0f32; 5];
        let _ = MatRef::new(&a, 2, 3);
    }
}
