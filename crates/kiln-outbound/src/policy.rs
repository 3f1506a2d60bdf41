//! [`OutboundPolicy`]: the exceptions an operator (or an API key) allows, and the check
//! every address of a host passes before a connection is made to it.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use ipnet::IpNet;

use crate::address::classify;
use crate::error::OutboundError;

/// Most exceptions one policy holds (each address is checked against all of them).
pub const MAX_EXCEPTIONS: usize = 256;

/// One allowed exception to the address rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exception {
    /// A host name the operator trusts, whatever it resolves to; `*.example.com`
    /// matches every name under `example.com` (not `example.com` itself).
    Host(String),
    /// A network whose addresses may be reached, e.g. `10.1.0.0/16` or `127.0.0.1/32`.
    Net(IpNet),
}

impl Exception {
    /// Parses a host name, a `*.` wildcard name, a CIDR network or a single address.
    pub fn parse(entry: &str) -> Result<Self, OutboundError> {
        let bad = |reason| OutboundError::BadException {
            entry: entry.to_owned(),
            reason,
        };
        let text = entry.trim().trim_start_matches('[').trim_end_matches(']');
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Self::Net(net.trunc()));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Net(IpNet::from(ip)));
        }
        if text.contains('/') {
            return Err(bad(
                "a network must be an address, '/', and a prefix length",
            ));
        }
        let name = text.to_ascii_lowercase();
        let labels = name.strip_prefix("*.").unwrap_or(&name);
        let valid = labels.len() <= 253
            && labels.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(bad(
                "a host name has dot-separated labels of letters, digits and '-'",
            ));
        }
        Ok(Self::Host(name))
    }

    fn allows_host(&self, host: &str) -> bool {
        match self {
            Self::Host(name) => match name.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|head| head.ends_with('.') && head.len() > 1),
                None => host == name,
            },
            Self::Net(_) => false,
        }
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        match self {
            Self::Net(net) => net.contains(&ip),
            Self::Host(_) => false,
        }
    }
}

/// A resolved name's addresses, or the resolver's failure.
pub type LookupFuture = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// Turns a host name into addresses. The system resolver in production; tests put a
/// scripted one here to play a rebinding name server.
pub trait NameLookup: Send + Sync {
    fn lookup(&self, host: &str, port: u16) -> LookupFuture;
}

/// The operating system's resolver (through Tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl NameLookup for SystemLookup {
    fn lookup(&self, host: &str, port: u16) -> LookupFuture {
        let host = host.to_owned();
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// What a server-side fetch may reach. The default denies every non-public address and
/// allows nothing else; exceptions widen it.
#[derive(Clone)]
pub struct OutboundPolicy {
    exceptions: Arc<[Exception]>,
    lookup: Arc<dyn NameLookup>,
}

impl Default for OutboundPolicy {
    fn default() -> Self {
        Self {
            exceptions: Arc::from([]),
            lookup: Arc::new(SystemLookup),
        }
    }
}

impl std::fmt::Debug for OutboundPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundPolicy")
            .field("exceptions", &self.exceptions)
            .finish_non_exhaustive()
    }
}

impl OutboundPolicy {
    /// The default rules with `exceptions` allowed.
    pub fn new(exceptions: Vec<Exception>) -> Result<Self, OutboundError> {
        Self::default().with_exceptions(&exceptions)
    }

    /// This policy with `more` exceptions too (an API key's own, on top of the node's).
    pub fn with_exceptions(&self, more: &[Exception]) -> Result<Self, OutboundError> {
        if self.exceptions.len() + more.len() > MAX_EXCEPTIONS {
            return Err(OutboundError::BadException {
                entry: format!("{} entries", self.exceptions.len() + more.len()),
                reason: "at most 256 outbound exceptions are allowed",
            });
        }
        let mut all = self.exceptions.to_vec();
        all.extend(more.iter().cloned());
        Ok(Self {
            exceptions: all.into(),
            lookup: self.lookup.clone(),
        })
    }

    /// This policy resolving names through `lookup`.
    pub fn with_lookup(mut self, lookup: Arc<dyn NameLookup>) -> Self {
        self.lookup = lookup;
        self
    }

    pub fn exceptions(&self) -> &[Exception] {
        &self.exceptions
    }

    /// Whether `host` (a name, or an address literal) may be reached at `ip`.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), OutboundError> {
        let class = classify(ip);
        let host = normalize(host);
        if class.is_public()
            || self
                .exceptions
                .iter()
                .any(|e| e.allows_ip(ip) || e.allows_host(&host))
        {
            Ok(())
        } else {
            Err(OutboundError::Denied { host, class })
        }
    }

    /// Resolves `host` and checks every address it resolves to; the connection must be
    /// made to the returned addresses and no others (so a second, different answer from
    /// the name server is never used). One denied address refuses the host: a name that
    /// answers with both a public and a private address is a rebinding attempt or a
    /// misconfiguration, and either way not safe to connect to.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, OutboundError> {
        let name = normalize(host);
        if let Some(ip) = ip_literal(&name) {
            self.check_ip(&name, ip)?;
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let unresolved = || OutboundError::Unresolved { host: name.clone() };
        let addrs = self
            .lookup
            .lookup(&name, port)
            .await
            .map_err(|_| unresolved())?;
        if addrs.is_empty() {
            return Err(unresolved());
        }
        for addr in &addrs {
            self.check_ip(&name, addr.ip())?;
        }
        Ok(addrs)
    }
}

/// The address `host` spells, if it is an address literal (an IPv6 one with or without
/// its brackets), rather than a name to resolve.
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    normalize(host).parse().ok()
}

/// Lower case, without an IPv6 literal's brackets or a trailing root dot.
fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::AddressClass;

    /// A name server that gives each lookup the next answer of its script.
    struct Scripted {
        answers: Vec<Vec<IpAddr>>,
        calls: AtomicUsize,
    }

    impl NameLookup for Scripted {
        fn lookup(&self, _host: &str, port: u16) -> LookupFuture {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let ips = self.answers[n.min(self.answers.len() - 1)].clone();
            Box::pin(async move {
                Ok(ips
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect())
            })
        }
    }

    fn scripted(answers: &[&[&str]]) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: answers
                .iter()
                .map(|a| a.iter().map(|s| s.parse().expect("ip")).collect())
                .collect(),
            calls: AtomicUsize::new(0),
        })
    }

    fn denied_class(r: Result<Vec<SocketAddr>, OutboundError>) -> AddressClass {
        match r {
            Err(OutboundError::Denied { class, .. }) => class,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn literals_of_every_denied_class_are_refused_by_default() {
        let policy = OutboundPolicy::default();
        for (host, class) in [
            ("127.0.0.1", AddressClass::Loopback),
            ("[::1]", AddressClass::Loopback),
            ("10.0.0.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::Metadata),
            ("fe80::1", AddressClass::LinkLocal),
            ("239.1.1.1", AddressClass::Multicast),
            ("0.0.0.0", AddressClass::Unspecified),
        ] {
            assert_eq!(
                denied_class(policy.resolve(host, 80).await),
                class,
                "{host}"
            );
        }
        assert!(policy.resolve("93.184.216.34", 80).await.is_ok());
    }

    #[tokio::test]
    async fn localhost_is_loopback_through_the_system_resolver() {
        let policy = OutboundPolicy::default();
        let class = denied_class(policy.resolve("localhost", 80).await);
        assert_eq!(class, AddressClass::Loopback);
        let message = policy
            .resolve("LOCALHOST.", 80)
            .await
            .expect_err("loopback")
            .to_string();
        assert!(
            message.contains("'localhost'") && message.contains("loopback"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn rebinding_gets_nothing_it_was_not_checked_for() {
        // First answer public, second loopback: each resolution is checked, and the
        // addresses returned are the only ones the client connects to.
        let ns = scripted(&[&["93.184.216.34"], &["127.0.0.1"]]);
        let policy = OutboundPolicy::default().with_lookup(ns.clone());
        let first = policy.resolve("rebind.example", 443).await.expect("public");
        assert_eq!(first, vec!["93.184.216.34:443".parse().expect("addr")]);
        let second = policy.resolve("rebind.example", 443).await;
        assert_eq!(denied_class(second), AddressClass::Loopback);
        // A mixed answer is refused whole, not filtered.
        let mixed = scripted(&[&["93.184.216.34", "10.0.0.7"]]);
        let policy = OutboundPolicy::default().with_lookup(mixed);
        assert_eq!(
            denied_class(policy.resolve("mixed.example", 80).await),
            AddressClass::Private
        );
    }

    #[tokio::test]
    async fn exceptions_allow_what_they_name_and_nothing_else() {
        let ns = scripted(&[&["10.1.2.3"]]);
        let policy = OutboundPolicy::new(vec![
            Exception::parse("10.1.0.0/16").expect("net"),
            Exception::parse("*.corp.example").expect("wildcard"),
            Exception::parse("127.0.0.1").expect("single address"),
        ])
        .expect("policy")
        .with_lookup(ns);
        assert!(policy.resolve("10.1.200.1", 80).await.is_ok());
        assert!(policy.resolve("127.0.0.1", 80).await.is_ok());
        assert!(policy.resolve("anything.example", 80).await.is_ok()); // 10.1.2.3
        assert!(policy
            .check_ip("mcp.corp.example", "192.168.0.9".parse().expect("ip"))
            .is_ok());
        assert!(policy
            .check_ip("corp.example", "192.168.0.9".parse().expect("ip"))
            .is_err());
        assert!(policy
            .check_ip("x.evilcorp.example", "192.168.0.9".parse().expect("ip"))
            .is_err());
        assert_eq!(
            denied_class(policy.resolve("127.0.0.2", 80).await),
            AddressClass::Loopback
        );
        assert_eq!(
            denied_class(policy.resolve("10.2.0.1", 80).await),
            AddressClass::Private
        );
    }

    #[test]
    fn bad_exceptions_are_refused_with_the_reason() {
        for entry in ["", "10.0.0.0/33", "exa mple.com", "*.", "a..b", "http://x"] {
            assert!(
                matches!(
                    Exception::parse(entry),
                    Err(OutboundError::BadException { .. })
                ),
                "{entry:?}"
            );
        }
        assert_eq!(
            Exception::parse("10.9.8.7/8"),
            Ok(Exception::Net("10.0.0.0/8".parse().expect("net")))
        );
        assert_eq!(
            Exception::parse("MCP.Example.com"),
            Ok(Exception::Host("mcp.example.com".into()))
        );
    }
}
