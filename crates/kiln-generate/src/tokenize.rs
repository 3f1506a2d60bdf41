//! [`Generator::tokenize`] and [`Generator::detokenize`]: a text model's tokenizer and
//! chat template, without generating.

use kiln_host::ModelKind;

use crate::call::Call;
use crate::error::Result;
use crate::generator::{blocking, Generator};
use crate::prompt::{self, PromptOrMessages};

#[derive(Debug, Clone)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    /// A plain text, or messages through the chat template.
    pub input: PromptOrMessages,
    pub add_generation_prompt: bool,
    /// Whether to add the special tokens; `None`: a text gets them, rendered messages
    /// get BOS only if the template did not write it.
    pub add_special_tokens: Option<bool>,
    pub return_token_strs: bool,
}

/// The token ids, their text when asked for, and the model's context length.
#[derive(Debug, Clone)]
pub struct Tokenized {
    pub tokens: Vec<u32>,
    pub token_strs: Option<Vec<String>>,
    pub max_model_len: usize,
}

impl Generator {
    pub async fn tokenize(&self, req: TokenizeRequest, call: &Call) -> Result<Tokenized> {
        let lease = self
            .lease_for(req.model.as_deref(), call, ModelKind::Generate)
            .await?;
        let model = lease.generator()?;
        let input = match req.input {
            PromptOrMessages::Text(p) => Err(p),
            PromptOrMessages::Messages(m) => Ok(prompt::to_template_messages(&m, "messages")?),
        };
        let (add_generation_prompt, add_special) =
            (req.add_generation_prompt, req.add_special_tokens);
        let want_strs = req.return_token_strs;
        let m = model.clone();
        let (tokens, token_strs) = blocking(move || {
            let ids = match input {
                Err(text) => prompt::encode(&m, &text, add_special.unwrap_or(true), "prompt")?,
                Ok(msgs) => {
                    let text = prompt::render(&m, &msgs, None, add_generation_prompt, "messages")?;
                    match add_special {
                        Some(add) => prompt::encode(&m, &text, add, "messages")?,
                        None => prompt::encode_rendered(&m, &text)?,
                    }
                }
            };
            let strs = want_strs.then(|| {
                ids.iter()
                    .map(|&t| String::from_utf8_lossy(m.tokenizer.token_bytes(t)).into_owned())
                    .collect()
            });
            Ok((ids, strs))
        })
        .await?;
        Ok(Tokenized {
            tokens,
            token_strs,
            max_model_len: model.engine_config.max_model_len,
        })
    }

    /// The text of `tokens` on the text model `model` names.
    pub async fn detokenize(
        &self,
        model: Option<&str>,
        tokens: Vec<u32>,
        call: &Call,
    ) -> Result<String> {
        let lease = self.lease_for(model, call, ModelKind::Generate).await?;
        let model = lease.generator()?;
        prompt::check_token_ids(&tokens, model.tokenizer.vocab_size(), "tokens")?;
        blocking(move || Ok(model.tokenizer.decode(&tokens, false))).await
    }
}
