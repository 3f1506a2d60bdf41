//! `ConstraintEnv`: llguidance's tokenizer environment over Kiln's own tokenizer, and
//! the parser factory that compiles grammars against it (one per model).
//!
//! llguidance ships `toktrie_hf_tokenizers`, but it pins another `tokenizers` release
//! and would tokenize differently from Kiln (which reproduces llama.cpp's ids), so the
//! trie is built from [`Tokenizer::token_bytes`] instead.

use std::sync::Arc;

use kiln_engine::ConstraintFactory;
use kiln_tokenizer::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::ParserFactory;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{Error, Result};
use crate::grammar::{lark_literal, top_level, with_options};
use crate::matcher::{llg_message, LlgFactory};
use crate::tools::grammar::{arguments_schema, schema_mode};
use crate::{GrammarSpec, ToolCallSpec};

/// Lexer work allowed for one token's mask (llguidance's unit; about 14k per ms). A
/// grammar that needs more fails that sequence instead of stalling the engine's step.
const STEP_LEXER_FUEL: u64 = 500_000;
/// Earley items allowed for one token's mask (about 20k per ms).
const STEP_MAX_ITEMS: usize = 100_000;

/// The token trie of a model's vocabulary and Kiln's tokenizer for llguidance.
struct KilnTokEnv {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for KilnTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Grammar literals are text: control-token text stays plain text here (grammars
        // name control tokens through the trie's marker instead). llguidance only asks
        // for well-formed UTF-8 in practice; anything else falls back to the trie's
        // greedy tokenization, which is always valid.
        match std::str::from_utf8(s) {
            Ok(text) => match self.tokenizer.encode(text, false, false) {
                Ok(ids) => ids,
                Err(_) => self.trie.greedy_tokenize(s),
            },
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// Everything needed to compile grammars for one model; built once, shared by requests.
pub struct ConstraintEnv {
    factory: ParserFactory,
    tokenizer: Arc<Tokenizer>,
    /// Every end-of-generation id (all EOS to the grammar).
    eos: Arc<[u32]>,
    /// Tokens the masks cover: the larger of the model's logits and the tokenizer.
    n_vocab: usize,
}

impl std::fmt::Debug for ConstraintEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintEnv")
            .field("n_vocab", &self.n_vocab)
            .field("tokenizer_vocab", &self.tokenizer.vocab_size())
            .finish()
    }
}

impl ConstraintEnv {
    /// The environment of a model whose logits cover `n_vocab` tokens. Ids the tokenizer
    /// doesn't know (a padded embedding matrix) are never allowed.
    ///
    /// Takes the `Arc` because grammars tokenize their literals with it for the life of
    /// the environment.
    pub fn new(tokenizer: &Arc<Tokenizer>, n_vocab: usize) -> Result<Self> {
        let words = trie_words(tokenizer, n_vocab);
        let eos: Vec<u32> = tokenizer
            .eos_ids()
            .iter()
            .copied()
            .filter(|&id| (id as usize) < words.len())
            .collect();
        let Some(&first_eos) = eos.first() else {
            return Err(Error::Vocabulary(
                "the tokenizer has no end-of-generation token".into(),
            ));
        };
        let vocab = u32::try_from(words.len())
            .map_err(|_| Error::Vocabulary(format!("{} tokens is too many", words.len())))?;
        let mut info = TokRxInfo::new(vocab, first_eos);
        info.tok_bos = tokenizer.bos_id();
        // Every end-of-generation id is EOS to the grammar: allowed together, any ends it.
        // toktrie asserts on vocabularies it can't represent; a model file shouldn't
        // take the server down with it.
        let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words).with_eos_tokens(&eos))
            .map_err(|_| Error::Vocabulary("toktrie rejected the vocabulary".into()))?;
        let env: TokEnv = Arc::new(KilnTokEnv {
            trie,
            tokenizer: tokenizer.clone(),
        });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::Vocabulary(llg_message(&e.to_string())))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits {
            step_lexer_fuel: STEP_LEXER_FUEL,
            step_max_items: STEP_MAX_ITEMS,
            // Errors reach logs and clients; the parser state and grammar dump in a
            // verbose error can be megabytes.
            verbose_errors: false,
            ..ParserLimits::default()
        };
        Ok(Self {
            factory,
            tokenizer: tokenizer.clone(),
            eos: eos.into(),
            n_vocab: words.len(),
        })
    }

    /// Tokens the masks cover (the larger of `n_vocab` and the tokenizer's vocabulary).
    pub fn vocab_size(&self) -> usize {
        self.n_vocab
    }

    /// Compiles `spec` now (so a bad schema or grammar fails here, naming the problem);
    /// the factory starts a cheap copy of the compiled parser per sequence.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Arc<dyn ConstraintFactory>> {
        let grammar = top_level(spec, self)?;
        self.compile_grammar(grammar).map_err(|e| match (e, spec) {
            (Error::Grammar(msg), GrammarSpec::ToolCalls(tools)) => {
                self.blame_tool(tools).unwrap_or(Error::Grammar(msg))
            }
            (e, _) => e,
        })
    }

    /// The first declared function whose parameters schema fails to compile on its own,
    /// as an error naming it (only on the error path: one compile per function).
    fn blame_tool(&self, spec: &ToolCallSpec) -> Option<Error> {
        spec.tools.iter().find_map(|t| {
            let schema = with_options(&arguments_schema(&t.parameters), schema_mode(t)).ok()?;
            let err = self
                .factory
                .create_parser(TopLevelGrammar::from_json_schema(schema))
                .err()?;
            Some(Error::Grammar(format!(
                "function `{}` parameters: {}",
                t.name,
                llg_message(&err.to_string())
            )))
        })
    }

    fn compile_grammar(&self, grammar: TopLevelGrammar) -> Result<Arc<dyn ConstraintFactory>> {
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| Error::Grammar(llg_message(&e.to_string())))?;
        Ok(Arc::new(LlgFactory::new(
            parser,
            self.tokenizer.vocab_size(),
            self.eos.clone(),
        )?))
    }

    /// The bytes the trie holds for `token` (control tokens start with the marker 0xFF).
    pub fn token_bytes(&self, token: u32) -> Vec<u8> {
        self.factory.tok_env().tok_trie().token(token).to_vec()
    }

    /// `text` as a Lark grammar item: the control token of that text when the vocabulary
    /// has one (generated as the token, shown only when decoding keeps special tokens),
    /// else a string literal.
    pub(crate) fn lark_text_or_token(&self, text: &str) -> String {
        match self.tokenizer.token_id(text) {
            Some(id) if self.tokenizer.is_special(id) => format!("<[{id}]>"),
            _ => lark_literal(text),
        }
    }
}

/// One entry per token id: its bytes, control tokens (and end-of-generation tokens,
/// which are never text) prefixed with the trie's special-token marker so grammars can
/// name them (`<|im_end|>`) and text can't produce them. Ids past the tokenizer's
/// vocabulary are empty, which the trie never allows.
fn trie_words(tokenizer: &Tokenizer, n_vocab: usize) -> Vec<Vec<u8>> {
    let known = tokenizer.vocab_size();
    (0..n_vocab.max(known))
        .map(|id| {
            let Ok(id) = u32::try_from(id) else {
                return Vec::new();
            };
            if id as usize >= known {
                return Vec::new();
            }
            let bytes = tokenizer.token_bytes(id);
            if (tokenizer.is_special(id) || tokenizer.is_eog(id)) && !bytes.is_empty() {
                let mut w = Vec::with_capacity(bytes.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(bytes);
                w
            } else {
                bytes.to_vec()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use kiln_engine::constraint::{mask_allows, mask_words};
    use kiln_engine::Constraint;
    use kiln_formats::GgufFile;
    use serde_json::json;

    use super::*;
    use crate::tools::grammar::tool_calls_lark;
    use crate::tools::{CLOSE_TAG, OPEN_TAG};
    use crate::{ToolDef, ToolFormat, ToolMode};

    fn env() -> ConstraintEnv {
        let gguf =
            GgufFile::open(kiln_testkit::gguf("qwen2.5-coder-0.5b-instruct")).expect("gguf opens");
        let tok = Arc::new(Tokenizer::from_gguf(&gguf).expect("tokenizer"));
        ConstraintEnv::new(&tok, tok.vocab_size()).expect("env")
    }

    fn mask(env: &ConstraintEnv, c: &mut Box<dyn Constraint>) -> Vec<u32> {
        let mut m = vec![0; mask_words(env.vocab_size())];
        c.fill_mask(&mut m).expect("mask");
        m
    }

    fn one(env: &ConstraintEnv, text: &str) -> u32 {
        let ids = env.tokenizer.encode(text, false, false).expect("encode");
        assert_eq!(ids.len(), 1, "{text:?}");
        ids[0]
    }

    /// Tool grammars for a model whose call tags are control tokens, played here by
    /// Qwen's `<|fim_prefix|>` and `<|fim_suffix|>`.
    #[test]
    fn control_token_tags_are_generated_as_tokens() {
        let env = env();
        let tok = env.tokenizer.clone();
        assert_eq!(env.lark_text_or_token(OPEN_TAG), "\"<tool_call>\"");
        let im_end = tok.token_id("<|im_end|>").expect("im_end");
        assert_eq!(
            env.lark_text_or_token("<|im_end|>"),
            format!("<[{im_end}]>")
        );

        let open = tok.token_id("<|fim_prefix|>").expect("fim_prefix");
        let close = tok.token_id("<|fim_suffix|>").expect("fim_suffix");
        let tags = |t: &str| {
            if t == OPEN_TAG {
                format!("<[{open}]>")
            } else {
                assert_eq!(t, CLOSE_TAG);
                format!("<[{close}]>")
            }
        };
        let spec = |mode| ToolCallSpec {
            tools: vec![ToolDef {
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}},
                                   "required": ["x"], "additionalProperties": false}),
                strict: true,
            }],
            mode,
            parallel: false,
            format: ToolFormat::Hermes,
        };
        let compile = |mode| {
            let lark = tool_calls_lark(&spec(mode), &tags).expect("grammar");
            env.compile_grammar(TopLevelGrammar::from_lark(lark))
                .expect("compiles")
                .start()
                .expect("starts")
        };
        let eos = tok.eos_ids();

        let mut c = compile(ToolMode::Required);
        let m = mask(&env, &mut c);
        let allowed: Vec<u32> = (0..env.vocab_size() as u32)
            .filter(|&t| mask_allows(&m, t))
            .collect();
        assert_eq!(allowed, vec![open], "only the opening token");

        let mut c = compile(ToolMode::Auto);
        let m = mask(&env, &mut c);
        assert!(mask_allows(&m, one(&env, "Hello")));
        assert!(mask_allows(&m, open));
        assert!(eos.iter().all(|&e| mask_allows(&m, e)));
        for t in tok
            .encode("Hello <tool_call> is text here", false, false)
            .expect("encode")
        {
            assert!(mask_allows(&mask(&env, &mut c), t));
            c.accept(t).expect("text");
        }
        c.accept(open).expect("the call opens");
        let body = "\n{\"name\": \"f\", \"arguments\": {\"x\": 12}}\n";
        for t in tok.encode(body, false, false).expect("encode") {
            assert!(mask_allows(&mask(&env, &mut c), t), "{t}");
            c.accept(t).expect("body");
        }
        let m = mask(&env, &mut c);
        let allowed: Vec<u32> = (0..env.vocab_size() as u32)
            .filter(|&t| mask_allows(&m, t))
            .collect();
        assert_eq!(allowed, vec![close], "only the closing token");
        c.accept(close).expect("closes");
        let m = mask(&env, &mut c);
        assert!(eos.iter().all(|&e| mask_allows(&m, e)));
        assert!(
            !mask_allows(&m, one(&env, "Hello")),
            "nothing after the call"
        );
    }
}
