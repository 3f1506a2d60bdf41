//! HTTP pieces that `kiln serve` and `kiln route` share, so a client cannot tell which
//! of the two answered: today, how an error becomes OpenAI's JSON error response.

mod error;

pub use error::{error_response, OpenAiError, RETRY_AFTER_SECS};
