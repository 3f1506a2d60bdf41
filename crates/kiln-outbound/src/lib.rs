//! The one policy every server-side fetch made for a client goes through (MCP servers
//! today; URL tools and webhooks tomorrow).
//!
//! A client that names a URL must not reach what only the server can: its loopback
//! services, the private network behind it, link-local neighbours or a cloud metadata
//! endpoint. So a host is **resolved first, every address it resolves to is checked, and
//! the connection is made to those checked addresses only** ([`OutboundPolicy::resolve`]
//! hands them to the HTTP client's resolver). Resolving again at connect time would let a
//! name that answered with a public address the first time answer with `127.0.0.1` the
//! second (DNS rebinding); pinning leaves no second answer to exploit.
//!
//! Exceptions (`--outbound-allow`, the config file, an API key's own list) are host names
//! (`mcp.internal`, `*.corp.example`) or networks in CIDR form (`10.1.0.0/16`,
//! `127.0.0.1/32`). Errors name the class of the refused address, never a remote answer.

mod address;
mod error;
mod policy;

pub use address::{classify, AddressClass};
pub use error::OutboundError;
pub use policy::{ip_literal, Exception, NameLookup, OutboundPolicy, SystemLookup};
