//! Encoder models: sentence embeddings and text classification.
//!
//! - [`Embedder`]: a BERT sentence encoder (all-MiniLM-L6-v2) loaded from
//!   `model.safetensors` + `tokenizer.json`, with sentence-transformers' mean pooling and
//!   L2 normalisation; checked against sentence-transformers itself.
//! - [`Classifier`]: the NanoGuard prompt-injection classifier. Its package ships a
//!   PyTorch pickle and a pickled tiktoken tokenizer; [`nanoguard::convert`] turns them
//!   into `model.safetensors`, `tokenizer.json` and `config.json` on first load, without
//!   Python, byte for byte as `scripts/fixtures/nanoguard_convert.py` does with torch.
//!
//! Both run many texts per forward pass (sequences packed without padding, attention
//! kept within each), f32 throughout (the classifier's linear layers optionally in
//! int8). Both are written against [`kiln_backend::EncoderBackend`], never against
//! kernels or a thread pool, so a second backend runs them too; they default to the
//! CPU backend ([`kiln_backend::CpuBackend`]). Both are `Send + Sync`. Inputs longer than
//! the model accepts are an [`Error::InputTooLong`] unless the caller asks for
//! truncation.

mod bert;
mod error;
mod json;
mod linear;
pub mod nanoguard;
mod qlinear;
mod threads;
mod tokenize;
mod weights;

pub use bert::{Embedder, Embeddings};
pub use error::{Error, Result};
pub use nanoguard::{Classification, Classifier, LabelScore, Precision};

#[cfg(test)]
mod tests {
    /// A server shares one loaded model between request handlers on blocking threads.
    #[test]
    fn models_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<super::Embedder>();
        shareable::<super::Classifier>();
    }
}
