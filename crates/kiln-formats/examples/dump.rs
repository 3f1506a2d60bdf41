fn main() {
    for p in std::env::args().skip(1) {
        let t = std::time::Instant::now();
        let f = kiln_formats::GgufFile::open(&p).unwrap();
        println!(
            "{p}: v{} {} keys {} tensors in {:?}",
            f.version(),
            f.metadata().len(),
            f.tensor_infos().len(),
            t.elapsed()
        );
        for (k, v) in f.metadata() {
            let s = format!("{v:?}");
            println!(
                "  {k} = {}",
                if s.len() > 100 {
                    format!(
                        "{}... (len {})",
                        &s[..100],
                        match v {
                            kiln_formats::MetaValue::Array(a) => a.len(),
                            _ => 0,
                        }
                    )
                } else {
                    s
                }
            );
        }
        let mut types = std::collections::BTreeMap::new();
        for t in f.tensor_infos() {
            *types.entry(t.dtype.name()).or_insert(0) += 1;
        }
        println!("  types {types:?}");
        for t in f.tensor_infos().iter().take(20) {
            println!("  {} {:?} {}", t.name, t.shape, t.dtype);
        }
    }
}
