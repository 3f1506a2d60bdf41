//! The response headers a node adds for the router's observability: where it runs,
//! whether the request waited for a model load, what it cost, and how sure a
//! classifier was. The router reads them into its inference events.

/// The node's colo (`kiln serve --colo NAME`), on every response.
pub const COLO_HEADER: &str = "x-kiln-colo";
/// Set when the request waited for its model to load: the wait, in milliseconds.
pub const COLD_START_HEADER: &str = "x-kiln-cold-start";
/// The request's neurons (`kiln_usage`'s formula), when it used a model and is not a
/// stream (a stream's headers go out before its usage is known).
pub const NEURONS_HEADER: &str = "x-kiln-neurons";
/// A stream's neurons: an SSE comment after its last event, `: x-kiln-neurons
/// 0.123456`, sent only when the request carries [`STREAM_NEURONS_HEADER`] (the
/// router's), which reads it and drops it: a client sees OpenAI's stream byte for byte.
pub const NEURONS_COMMENT: &str = ": x-kiln-neurons ";
/// Asks a node to end a stream with [`NEURONS_COMMENT`].
pub const STREAM_NEURONS_HEADER: &str = "x-kiln-stream-neurons";
/// A classification's top-class score, in `[0, 1]`.
pub const CONFIDENCE_HEADER: &str = "x-kiln-confidence";
