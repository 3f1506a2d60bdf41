//! Membership: the nodes given on the command line, the nodes and DNS names in the
//! config file (re-read every round, so editing it adds or removes nodes), and every
//! address those DNS names resolve to (a Kubernetes headless service lists one per
//! ready pod), re-resolved every round.
//!
//! A file that fails to read or parse, or a name that fails to resolve, keeps its
//! previous result: a DNS hiccup must not empty the ring.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{DnsSpec, NodeSpec, RouterConfig};
use crate::config_file::FileConfig;

/// Resolves a host name to addresses.
pub trait Resolver: Send + Sync + 'static {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> impl Future<Output = io::Result<Vec<SocketAddr>>> + Send;
}

/// The system resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Where nodes come from, and what each source said last.
pub struct Discovery<R> {
    nodes: Vec<NodeSpec>,
    dns: Vec<DnsSpec>,
    file: Option<PathBuf>,
    resolver: R,
    file_last: (Vec<NodeSpec>, Vec<DnsSpec>),
    dns_last: HashMap<(String, u16), Vec<SocketAddr>>,
}

impl<R: Resolver> Discovery<R> {
    pub fn new(config: &RouterConfig, resolver: R) -> Self {
        Self {
            nodes: config.nodes.clone(),
            dns: config.dns.clone(),
            file: config.config_file.clone(),
            resolver,
            file_last: (Vec::new(), Vec::new()),
            dns_last: HashMap::new(),
        }
    }

    /// One round: every node now, each id and each URL once (the first source to name
    /// it wins: flags, then the file, then DNS).
    pub async fn members(&mut self) -> Vec<NodeSpec> {
        if let Some(path) = &self.file {
            match FileConfig::load(path).and_then(|f| f.membership()) {
                Ok(m) => self.file_last = m,
                Err(e) => tracing::warn!("keeping the previous nodes of the config file: {e}"),
            }
        }
        let mut out: Vec<NodeSpec> = Vec::new();
        let push = |spec: NodeSpec, out: &mut Vec<NodeSpec>| {
            let id = spec.id();
            if !out.iter().any(|n| n.id() == id || n.url == spec.url) {
                out.push(spec);
            }
        };
        for spec in self.nodes.iter().chain(&self.file_last.0) {
            push(spec.clone(), &mut out);
        }
        let names: Vec<DnsSpec> = self.dns.iter().chain(&self.file_last.1).cloned().collect();
        for dns in names {
            let key = (dns.host.clone(), dns.port);
            match self.resolver.resolve(&dns.host, dns.port).await {
                Ok(mut addrs) => {
                    addrs.sort();
                    addrs.dedup();
                    self.dns_last.insert(key.clone(), addrs);
                }
                Err(e) => tracing::warn!(
                    name = %dns.host,
                    "cannot resolve; keeping its previous addresses: {e}"
                ),
            }
            for addr in self.dns_last.get(&key).into_iter().flatten() {
                push(dns.node(*addr), &mut out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Answers from a table the test changes between rounds.
    #[derive(Clone)]
    struct FakeDns(Arc<Mutex<io::Result<Vec<SocketAddr>>>>);

    impl Default for FakeDns {
        fn default() -> Self {
            Self(Arc::new(Mutex::new(Ok(Vec::new()))))
        }
    }

    impl FakeDns {
        fn set(&self, r: io::Result<Vec<SocketAddr>>) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = r;
        }
    }

    impl Resolver for FakeDns {
        async fn resolve(&self, _host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
            let r = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match &*r {
                Ok(v) => Ok(v.iter().map(|a| SocketAddr::new(a.ip(), port)).collect()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            }
        }
    }

    fn addrs(ips: &[&str]) -> io::Result<Vec<SocketAddr>> {
        Ok(ips
            .iter()
            .map(|ip| SocketAddr::new(ip.parse().unwrap_or([0, 0, 0, 0].into()), 0))
            .collect())
    }

    fn urls(nodes: &[NodeSpec]) -> Vec<&str> {
        nodes.iter().map(|n| n.url.as_str()).collect()
    }

    #[tokio::test]
    async fn dns_is_re_resolved_and_a_failure_keeps_the_last_answer() {
        let dns = FakeDns::default();
        dns.set(addrs(&["10.0.0.2", "10.0.0.1"]));
        let config = RouterConfig {
            nodes: vec![NodeSpec::parse("http://10.0.0.1:8000@name=fixed").expect("spec")],
            dns: vec![DnsSpec::parse("svc:8000@colo=ams").expect("dns")],
            ..RouterConfig::default()
        };
        let mut d = Discovery::new(&config, dns.clone());
        let m = d.members().await;
        // 10.0.0.1 is already the named node: not listed twice.
        assert_eq!(urls(&m), ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]);
        assert_eq!(
            (m[0].id(), m[1].id()),
            ("fixed".into(), "10.0.0.2:8000".into())
        );
        assert_eq!(m[1].colo.as_deref(), Some("ams"));
        dns.set(addrs(&["10.0.0.3"]));
        assert_eq!(urls(&d.members().await)[1..], ["http://10.0.0.3:8000"]);
        dns.set(Err(io::Error::other("SERVFAIL")));
        assert_eq!(urls(&d.members().await)[1..], ["http://10.0.0.3:8000"]);
    }

    #[tokio::test]
    async fn the_config_file_is_re_read_and_a_broken_edit_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("router.toml");
        std::fs::write(&path, "nodes = [\"http://a:1\", \"http://b:1\"]").expect("write");
        let config = RouterConfig {
            config_file: Some(path.clone()),
            ..RouterConfig::default()
        };
        let mut d = Discovery::new(&config, FakeDns::default());
        assert_eq!(urls(&d.members().await), ["http://a:1", "http://b:1"]);
        std::fs::write(&path, "nodes = [\"http://b:1\"]").expect("write");
        assert_eq!(urls(&d.members().await), ["http://b:1"]);
        std::fs::write(&path, "nodes = [").expect("write");
        assert_eq!(urls(&d.members().await), ["http://b:1"]);
    }
}
