//! An exact-match response cache, as AI gateways keep: deterministic requests
//! (temperature 0, or a fixed seed) answered from memory for a while. Entries expire
//! after a TTL; past the memory cap the least recently used go first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A cached answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub body: Vec<u8>,
    pub content_type: String,
}

struct Entry {
    value: Cached,
    stored: Instant,
    used: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<[u8; 32], Entry>,
    /// Last use → key, oldest first.
    lru: BTreeMap<u64, [u8; 32]>,
    bytes: usize,
    clock: u64,
}

pub struct ResponseCache {
    ttl: Duration,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl ResponseCache {
    pub fn new(ttl: Duration, max_bytes: usize) -> Self {
        Self {
            ttl,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn get(&self, key: &[u8; 32]) -> Option<Cached> {
        let mut g = self.lock();
        let inner = &mut *g;
        let expired = inner
            .map
            .get(key)
            .is_some_and(|e| e.stored.elapsed() > self.ttl);
        if expired {
            remove(inner, key);
            return None;
        }
        inner.clock += 1;
        let clock = inner.clock;
        let e = inner.map.get_mut(key)?;
        inner.lru.remove(&e.used);
        e.used = clock;
        inner.lru.insert(clock, *key);
        Some(e.value.clone())
    }

    pub fn put(&self, key: [u8; 32], value: Cached) {
        let size = value.body.len() + value.content_type.len();
        if size > self.max_bytes {
            return;
        }
        let mut g = self.lock();
        let inner = &mut *g;
        remove(inner, &key);
        while inner.bytes + size > self.max_bytes {
            let Some((_, oldest)) = inner.lru.pop_first() else {
                break;
            };
            if let Some(e) = inner.map.remove(&oldest) {
                inner.bytes -= e.value.body.len() + e.value.content_type.len();
            }
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.lru.insert(used, key);
        inner.bytes += size;
        inner.map.insert(
            key,
            Entry {
                value,
                stored: Instant::now(),
                used,
            },
        );
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn remove(inner: &mut Inner, key: &[u8; 32]) {
    if let Some(e) = inner.map.remove(key) {
        inner.lru.remove(&e.used);
        inner.bytes -= e.value.body.len() + e.value.content_type.len();
    }
}

/// Fields that never change an answer's content, left out of the key.
const IGNORED: &[&str] = &["user", "cache", "metadata", "stream_options"];

/// The cache key of a request: its scope (the caller's key and the route), and its JSON
/// body with keys sorted and [`IGNORED`] fields dropped, so key order and spacing
/// don't matter. The model and adapter are fields of the body.
pub fn request_key(scope: &[&str], body: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    for s in scope {
        h.update(s.as_bytes());
        h.update([0]);
    }
    let mut canonical = String::new();
    write_canonical(body, &mut canonical, true);
    h.update(canonical.as_bytes());
    h.finalize().into()
}

fn write_canonical(v: &Value, out: &mut String, top: bool) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m
                .keys()
                .filter(|k| !top || !IGNORED.contains(&k.as_str()))
                .collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_canonical(&m[*k], out, false);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out, false);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Whether a generation request's answer is the same every time: `temperature` 0, or
/// a `seed` (Kiln's sampling is seeded per sequence); and not refused with
/// `"cache": false`.
pub fn deterministic(body: &Value) -> bool {
    if body.get("cache") == Some(&Value::Bool(false)) {
        return false;
    }
    let temperature = body
        .get("temperature")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    let seeded = body.get("seed").is_some_and(|s| !s.is_null());
    temperature == 0.0 || seeded
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(n: usize) -> Cached {
        Cached {
            body: vec![b'x'; n],
            content_type: "application/json".into(),
        }
    }

    #[test]
    fn hits_expire_and_the_least_used_go_first() {
        let cache = ResponseCache::new(Duration::from_millis(200), 3 * (100 + 16));
        for k in 0..3u8 {
            cache.put([k; 32], c(100));
        }
        assert!(cache.get(&[0; 32]).is_some(), "0 is now the most recent");
        cache.put([9; 32], c(100));
        assert!(
            cache.get(&[1; 32]).is_none(),
            "1 was the least recently used"
        );
        assert!(cache.get(&[0; 32]).is_some());
        assert!(cache.bytes() <= 3 * 116);
        cache.put([7; 32], c(10_000));
        assert!(cache.get(&[7; 32]).is_none(), "too big to keep");
        std::thread::sleep(Duration::from_millis(250));
        assert!(cache.get(&[0; 32]).is_none(), "expired");
    }

    #[test]
    fn keys_ignore_order_and_noise_but_not_content() {
        let a = json!({"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "hi"}], "user": "u1"});
        let b = json!({"messages": [{"content": "hi", "role": "user"}], "user": "u2", "temperature": 0, "model": "m"});
        assert_eq!(
            request_key(&["k", "/v1/chat"], &a),
            request_key(&["k", "/v1/chat"], &b)
        );
        assert_ne!(
            request_key(&["other", "/v1/chat"], &a),
            request_key(&["k", "/v1/chat"], &a)
        );
        let c = json!({"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "hi!"}]});
        assert_ne!(
            request_key(&["k", "/v1/chat"], &a),
            request_key(&["k", "/v1/chat"], &c)
        );
    }

    #[test]
    fn only_deterministic_requests_are_cached() {
        assert!(deterministic(&json!({"temperature": 0})));
        assert!(deterministic(&json!({"temperature": 0.8, "seed": 7})));
        assert!(!deterministic(&json!({"temperature": 0.8})));
        assert!(
            !deterministic(&json!({})),
            "OpenAI's default temperature is 1"
        );
        assert!(!deterministic(&json!({"temperature": 0, "cache": false})));
    }
}
