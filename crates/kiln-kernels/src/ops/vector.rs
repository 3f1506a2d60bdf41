//! BLAS-1 style vector ops.

use super::check_len;

/// Independent partial sums: vectorizes and bounds the rounding error growth.
const LANES: usize = 8;

/// `Σ a[i]·b[i]`.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    check_len("dot_f32", "b", a.len(), b.len());
    let mut acc = [0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (at, bt) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = at.iter().zip(bt).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `y[i] += alpha · x[i]`.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    check_len("axpy", "y", x.len(), y.len());
    for (o, &v) in y.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

/// `y[i] += x[i]`.
pub fn add_inplace(y: &mut [f32], x: &[f32]) {
    check_len("add_inplace", "x", y.len(), x.len());
    for (o, &v) in y.iter_mut().zip(x) {
        *o += v;
    }
}

/// `x[i] *= s`.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_covers_lanes_and_tail() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..19).map(|i| (i % 3) as f32 - 1.0).collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot_f32(&a, &b), want);
    }

    #[test]
    fn axpy_add_scale() {
        let mut y = [1.0f32, 2.0];
        axpy(2.0, &[1.0, -1.0], &mut y);
        assert_eq!(y, [3.0, 0.0]);
        add_inplace(&mut y, &[1.0, 1.0]);
        assert_eq!(y, [4.0, 1.0]);
        scale_inplace(&mut y, 0.5);
        assert_eq!(y, [2.0, 0.5]);
    }
}
