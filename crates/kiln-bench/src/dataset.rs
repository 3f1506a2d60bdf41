//! ShareGPT V3, as shipped (truncated mid-record), repaired and reduced to the
//! (first human turn, first model reply) pairs the serving benchmark draws from.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use kiln_catalog::{Cache, Progress};
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::{Error, Result};

/// Catalogue name of the data set.
pub const SHAREGPT_CATALOG_NAME: &str = "sharegpt-v3";

/// The end of a complete top-level record in the shipped file's layout (two-space indent).
const RECORD_END: &[u8] = b"\n  },\n";

/// One usable conversation: the prompt and the reply whose length sets the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// The first (human) turn's text.
    pub prompt: String,
    /// The second (model) turn's text.
    pub reply: String,
}

/// What loading found, for checks against the data set's known shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetStats {
    /// Complete records kept after the repair.
    pub records: usize,
    /// Records with at least two turns.
    pub multi_turn: usize,
    /// Records with at least two turns, the first from `human` and the second from `gpt`.
    pub human_then_gpt: usize,
    /// Bytes of the partial last record cut off by the repair (0 if the file was whole).
    pub bytes_cut: usize,
}

/// The usable conversations of a ShareGPT file, in file order.
#[derive(Debug, Clone)]
pub struct ShareGpt {
    pub conversations: Vec<Conversation>,
    pub stats: DatasetStats,
}

/// Makes sure the catalogue's ShareGPT file is in `cache` (fetching it if needed) and
/// returns its path.
pub fn fetch_sharegpt(cache: &Cache, progress: &dyn Progress) -> Result<PathBuf> {
    let catalog_err = |source| Error::Catalog {
        name: SHAREGPT_CATALOG_NAME.to_owned(),
        source,
    };
    let spec = kiln_catalog::find(SHAREGPT_CATALOG_NAME).map_err(catalog_err)?;
    cache.ensure(spec, progress).map_err(catalog_err)?;
    Ok(cache.primary_path(spec))
}

impl ShareGpt {
    /// Reads and repairs a ShareGPT JSON file and keeps the human-then-gpt conversations.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes(path, bytes)
    }

    /// Like [`ShareGpt::load`] on bytes already read; `path` only names them in errors.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let (json, bytes_cut) = repair(path, bytes)?;
        let records: Vec<Record> = serde_json::from_slice(&json).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        let mut stats = DatasetStats {
            records: records.len(),
            multi_turn: 0,
            human_then_gpt: 0,
            bytes_cut,
        };
        let mut conversations = Vec::new();
        for record in records {
            let turns = record.conversations;
            if turns.total < 2 {
                continue;
            }
            stats.multi_turn += 1;
            let [first, second] = turns.first_two;
            if first.from == "human" && second.from == "gpt" {
                stats.human_then_gpt += 1;
                conversations.push(Conversation {
                    prompt: first.value,
                    reply: second.value,
                });
            }
        }
        Ok(ShareGpt {
            conversations,
            stats,
        })
    }
}

/// Closes a truncated top-level array after its last complete record. A file that
/// already ends with `]` is returned unchanged.
fn repair(path: &Path, mut bytes: Vec<u8>) -> Result<(Vec<u8>, usize)> {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    if bytes[..end].ends_with(b"]") {
        return Ok((bytes, 0));
    }
    if !bytes.trim_ascii_start().starts_with(b"[") {
        return Err(Error::Dataset {
            path: path.to_owned(),
            reason: "it does not start with a JSON array".to_owned(),
        });
    }
    let cut = find_last(&bytes, RECORD_END).ok_or_else(|| Error::Dataset {
        path: path.to_owned(),
        reason: "no complete top-level record (`\\n  },\\n`) found".to_owned(),
    })?;
    // Keep "\n  }" (the record's closing brace), drop the comma and the partial record.
    let keep = cut + RECORD_END.len() - 2;
    let bytes_cut = bytes.len() - keep;
    bytes.truncate(keep);
    bytes.extend_from_slice(b"\n]\n");
    Ok((bytes, bytes_cut))
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

#[derive(Deserialize)]
struct Record {
    #[serde(default)]
    conversations: FirstTwoTurns,
}

#[derive(Deserialize, Default)]
struct Turn {
    #[serde(default)]
    from: String,
    #[serde(default)]
    value: String,
}

/// The first two turns of a conversation and how many there were; later turns are
/// skipped without being allocated.
#[derive(Default)]
struct FirstTwoTurns {
    first_two: [Turn; 2],
    total: usize,
}

impl<'de> Deserialize<'de> for FirstTwoTurns {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct TurnsVisitor;
        impl<'de> Visitor<'de> for TurnsVisitor {
            type Value = FirstTwoTurns;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of conversation turns")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<FirstTwoTurns, A::Error> {
                let mut out = FirstTwoTurns::default();
                while out.total < 2 {
                    match seq.next_element::<Turn>()? {
                        Some(turn) => out.first_two[out.total] = turn,
                        None => return Ok(out),
                    }
                    out.total += 1;
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    out.total += 1;
                }
                Ok(out)
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<FirstTwoTurns, E> {
                Ok(FirstTwoTurns::default())
            }
        }
        deserializer.deserialize_any(TurnsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> ShareGpt {
        ShareGpt::from_bytes(Path::new("t.json"), text.as_bytes().to_vec()).expect("loads")
    }

    const WHOLE: &str = "[\n  {\n    \"id\": \"a\",\n    \"conversations\": [\n      {\"from\": \"human\", \"value\": \"hi\"},\n      {\"from\": \"gpt\", \"value\": \"hello\"},\n      {\"from\": \"human\", \"value\": \"more\"}\n    ]\n  },\n  {\n    \"id\": \"b\",\n    \"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}, {\"from\": \"human\", \"value\": \"y\"}]\n  },\n  {\n    \"id\": \"c\",\n    \"conversations\": []\n  }\n]\n";

    #[test]
    fn whole_file_is_read_unchanged() {
        let d = load(WHOLE);
        assert_eq!(d.stats.records, 3);
        assert_eq!(d.stats.multi_turn, 2);
        assert_eq!(d.stats.human_then_gpt, 1);
        assert_eq!(d.stats.bytes_cut, 0);
        assert_eq!(d.conversations[0].prompt, "hi");
        assert_eq!(d.conversations[0].reply, "hello");
    }

    #[test]
    fn truncated_file_is_cut_after_the_last_complete_record() {
        let cut_at = WHOLE.find("\"id\": \"c\"").expect("marker") + 4;
        let d = load(&WHOLE[..cut_at]);
        assert_eq!(d.stats.records, 2);
        assert_eq!(d.stats.human_then_gpt, 1);
        assert!(d.stats.bytes_cut > 0);
    }

    #[test]
    fn garbage_is_an_error() {
        let r = ShareGpt::from_bytes(Path::new("t.json"), b"{\"a\": 1".to_vec());
        assert!(matches!(r, Err(Error::Dataset { .. })), "{r:?}");
        let r = ShareGpt::from_bytes(Path::new("t.json"), b"[\n  {\"x\": ".to_vec());
        assert!(matches!(r, Err(Error::Dataset { .. })), "{r:?}");
    }
}
