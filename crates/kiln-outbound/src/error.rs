//! Why an outbound request may not be made. Messages are shown to API clients as-is:
//! they name the host the client gave and the class of address it reached, and never
//! carry anything a remote server said.

use crate::address::AddressClass;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboundError {
    /// The host is, or resolves to, an address of a class the policy denies.
    #[error(
        "the address of '{host}' is not allowed: it is a {class} address, which this \
         server does not fetch for clients (an operator can allow it with --outbound-allow)"
    )]
    Denied { host: String, class: AddressClass },

    /// The host name did not resolve.
    #[error("the host name '{host}' could not be resolved")]
    Unresolved { host: String },

    /// An exception in the configuration is neither a host name nor a CIDR network.
    #[error("outbound exception '{entry}' is not a host name or a CIDR network ({reason})")]
    BadException { entry: String, reason: &'static str },
}
