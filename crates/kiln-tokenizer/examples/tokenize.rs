//! Prints the token ids llama.cpp would produce for a text, and how long loading took.
//!
//! `cargo run --release -p kiln-tokenizer --example tokenize -- MODEL.gguf "text" [--special]`

use std::time::Instant;

use kiln_formats::GgufFile;
use kiln_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(text)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: tokenize MODEL.gguf TEXT [--special]");
        std::process::exit(2);
    };
    let parse_special = args.iter().any(|a| a == "--special");
    let gguf = GgufFile::open(path)?;
    let start = Instant::now();
    let tokenizer = Tokenizer::from_gguf(&gguf)?;
    let built = start.elapsed();
    let ids = tokenizer.encode(text, true, parse_special)?;
    println!("ids: {ids:?}");
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned())
        .collect();
    println!("pieces: {pieces:?}");
    println!("decoded: {:?}", tokenizer.decode(&ids, false));
    println!(
        "tokenizer built in {:.1} ms ({} tokens)",
        built.as_secs_f64() * 1e3,
        tokenizer.vocab_size()
    );
    Ok(())
}
