//! HTTP pieces that `kiln serve` and `kiln route` share, so a client cannot tell which
//! of the two answered and both hold up the same way under slow or hostile clients: the
//! accept loop with its connection limits ([`listen`]), the body deadline
//! ([`deadline`]), the CORS policy ([`CorsPolicy`]), the failures of the exchange itself
//! ([`TransportError`]), how an error becomes OpenAI's JSON error response, and static
//! files served from memory ([`assets`]).

pub mod assets;
mod bearer;
mod cors;
pub mod deadline;
mod error;
pub mod listen;
mod settings;
mod sse;
mod transport;

pub use bearer::{authorize, bearer, find_key, ApiKey};
pub use cors::{BadOrigin, CorsPolicy};
pub use deadline::{body_deadline, is_body_timeout, BodyTimeout};
pub use error::{
    error_response, status_of, ClassifiedError, ErrorKind, OpenAiError, RETRY_AFTER_SECS,
};
pub use listen::{serve, ConnectionLimits, LimitError};
pub use settings::HttpSettings;
pub use sse::is_event_stream;
pub use transport::{method_not_allowed, route_not_found, TransportError};
