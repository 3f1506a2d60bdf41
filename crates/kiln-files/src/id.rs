//! File ids and file names: new ids in OpenAI's shape, the check every id from a
//! caller passes before it names anything on disk, and the name a client sent cut to
//! what is stored.
//!
//! An id is only ever joined onto the contents directory after [`is_valid_id`]: its
//! alphabet has no `.`, `/` or `\`, so no id can reach outside that directory.

use rand::distr::Alphanumeric;
use rand::Rng;

use crate::error::FileError;

/// What every file id starts with.
pub const ID_PREFIX: &str = "file-";

/// Random characters in a new id (as OpenAI's ids).
const ID_RANDOM_LEN: usize = 24;

/// Most characters after the prefix that an id from a caller may have.
const MAX_ID_SUFFIX: usize = 64;

/// Longest file name stored, in bytes.
pub const MAX_FILENAME_BYTES: usize = 512;

/// A new id: `file-` and 24 random characters from `[A-Za-z0-9]`.
pub fn new_id() -> String {
    let suffix: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(ID_RANDOM_LEN)
        .map(char::from)
        .collect();
    format!("{ID_PREFIX}{suffix}")
}

/// Whether `id` is `file-` and 1 to 64 characters from `[A-Za-z0-9_-]`: the only ids
/// looked up, and the only ones that become paths.
pub fn is_valid_id(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX).is_some_and(|rest| {
        (1..=MAX_ID_SUFFIX).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// The name stored for what a client sent: its last path component (some clients send
/// a path), 1 to [`MAX_FILENAME_BYTES`] bytes, no NUL, not `.` or `..`.
pub(crate) fn clean_filename(sent: &str) -> Result<String, FileError> {
    let name = sent.rsplit(['/', '\\']).next().unwrap_or(sent);
    if name.is_empty() || name == "." || name == ".." {
        return Err(FileError::InvalidName(
            "the file name is empty; send the file with a name".into(),
        ));
    }
    if name.contains('\0') {
        return Err(FileError::InvalidName(
            "the file name contains a NUL character".into(),
        ));
    }
    if name.len() > MAX_FILENAME_BYTES {
        return Err(FileError::InvalidName(format!(
            "the file name is {} bytes long; the limit is {MAX_FILENAME_BYTES}",
            name.len()
        )));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_have_openais_shape_and_pass_the_check() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        let rest = a.strip_prefix(ID_PREFIX).expect("prefix");
        assert_eq!(rest.len(), 24);
        assert!(rest.bytes().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert!(is_valid_id(&a));
    }

    #[test]
    fn ids_that_could_name_another_path_are_refused() {
        for bad in [
            "",
            "file-",
            "file-../../x",
            "../files.sqlite3",
            "files.sqlite3",
            "file-a/b",
            "file-a\\b",
            "file-a.b",
            "file-a\0",
            "FILE-abc",
            "file-é",
            &format!("file-{}", "a".repeat(65)),
        ] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
        for good in [
            "file-a",
            "file-batch_123-output",
            &format!("file-{}", "Z".repeat(64)),
        ] {
            assert!(is_valid_id(good), "{good:?}");
        }
    }

    #[test]
    fn file_names_keep_their_last_component() {
        let ok = |s: &str| clean_filename(s).expect(s);
        assert_eq!(ok("data.jsonl"), "data.jsonl");
        assert_eq!(ok("/home/me/data.jsonl"), "data.jsonl");
        assert_eq!(ok("C:\\Users\\me\\batch.jsonl"), "batch.jsonl");
        assert_eq!(ok("a b (1).txt"), "a b (1).txt");
        assert_eq!(
            ok(&"n".repeat(MAX_FILENAME_BYTES)).len(),
            MAX_FILENAME_BYTES
        );
        for bad in [
            "",
            "dir/",
            "..",
            ".",
            "a\0b",
            &"n".repeat(MAX_FILENAME_BYTES + 1),
        ] {
            let err = clean_filename(bad).expect_err(bad);
            assert!(matches!(err, FileError::InvalidName(_)), "{bad:?}: {err}");
        }
    }
}
