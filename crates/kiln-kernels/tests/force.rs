//! `Isa::force` replaces the table `KernelTable::best()` (and so every public `ops`
//! function) uses, even after `best()` already resolved the detected one. Its own test
//! binary: forcing is process-wide.

use kiln_kernels::{ops, Error, Isa, KernelTable};

#[test]
fn force_switches_the_cached_best_table() {
    let detected = Isa::detect();
    assert_eq!(KernelTable::best().isa(), detected);
    // AVX2 (a slower ISA than the detected one on an AVX-512 machine), else scalar.
    let forced = if Isa::available().contains(&Isa::Avx2) {
        Isa::Avx2
    } else {
        Isa::Scalar
    };
    Isa::force(forced).expect("an available ISA can be forced");
    assert_eq!(KernelTable::best().isa(), forced);
    assert!(std::ptr::eq(
        KernelTable::best(),
        KernelTable::for_isa(forced).expect("available")
    ));
    // Forcing it again is fine; another one is an error and changes nothing.
    Isa::force(forced).expect("same ISA again");
    if let Some(other) = Isa::available().into_iter().find(|&i| i != forced) {
        assert!(matches!(
            Isa::force(other),
            Err(Error::IsaAlreadyForced { .. })
        ));
    }
    assert_eq!(KernelTable::best().isa(), forced);

    // The public ops still give the reference results (every table is bit-exact).
    let xs: Vec<f32> = (0..100).map(|i| i as f32 * -0.37 + 5.0).collect();
    let mut got = xs.clone();
    ops::exp_inplace(&mut got);
    for (x, g) in xs.iter().zip(&got) {
        assert_eq!(g.to_bits(), ops::exp_f32(*x).to_bits());
    }
}
