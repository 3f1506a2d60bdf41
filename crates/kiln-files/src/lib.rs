//! Kiln's one implementation of OpenAI's Files API, without HTTP: uploaded files kept
//! on disk, their metadata in SQLite, each file visible only to the key that owns it.
//!
//! A [`FileStore`] owns one directory: `files.sqlite3` (one row per file), `files/<id>`
//! (the contents, one plain file each), `files/incoming/` (uploads in progress) and
//! `files/kiln.lock` (held while a process has the store open). An
//! upload streams into `incoming/` through an [`Upload`] and becomes visible only when
//! [`Upload::finish`] has fsynced it, renamed it into place and committed its row, so a
//! crash at any point leaves either no file or a complete one; what a crash strands
//! (a partial upload, contents without a row) is swept when the store is next opened.
//!
//! Every query filters on the owner (a key id), so another owner's file is simply not
//! found, and ids from callers are checked before they name anything on disk. Per-file
//! and per-owner caps ([`Limits`]) turn into [`FileError::TooLarge`] and
//! [`FileError::OwnerFull`], whose messages are fit to show an API user.

mod error;
mod id;
mod inner;
mod list;
mod store;
mod sweep;
mod upload;

pub use error::FileError;
pub use id::{is_valid_id, new_id, ID_PREFIX, MAX_FILENAME_BYTES};
pub use inner::{Limits, StoredFile};
pub use list::{ListQuery, Order, Page};
pub use store::FileStore;
pub use upload::Upload;
