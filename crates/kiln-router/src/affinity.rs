//! Session affinity: requests of one session go to the same node of the model's shard
//! while it is healthy, so the node's prefix cache holds the conversation so far.
//!
//! The choice is rendezvous hashing (highest random weight) of the session key over
//! the shard's node ids: stateless, so every router replica picks the same node; a node
//! failing moves only its own sessions (to their second choice), and they come back
//! when it recovers.

use axum::http::HeaderMap;

use crate::hash::hash_parts;

/// The header that names a session.
pub const SESSION_HEADER: &str = "x-session-affinity";

/// The session key: the `x-session-affinity` header, else the body's `user` field.
pub fn session_key(headers: &HeaderMap, user: Option<&str>) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .or(user.map(str::trim).filter(|u| !u.is_empty()))
        .map(str::to_string)
}

/// Indices of `node_ids`, the session's preferred node first.
pub fn rank(key: &str, node_ids: &[&str]) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = node_ids
        .iter()
        .enumerate()
        .map(|(i, id)| (hash_parts(&[key.as_bytes(), id.as_bytes()]), i))
        .collect();
    // Highest weight first; ties (vanishingly rare) by id so the order is total.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| node_ids[a.1].cmp(node_ids[b.1])));
    scored.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn header_wins_over_user() {
        let mut h = HeaderMap::new();
        assert_eq!(session_key(&h, Some(" u1 ")), Some("u1".into()));
        assert_eq!(session_key(&h, Some("")), None);
        h.insert(SESSION_HEADER, HeaderValue::from_static("s9"));
        assert_eq!(session_key(&h, Some("u1")), Some("s9".into()));
    }

    #[test]
    fn removing_another_node_keeps_the_choice_and_sessions_spread() {
        let ids = ["n1", "n2", "n3", "n4"];
        let mut counts = [0usize; 4];
        for s in 0..4000 {
            let key = format!("session-{s}");
            let first = rank(&key, &ids)[0];
            counts[first] += 1;
            // Drop a node that is not the choice: the choice stays.
            let other = (first + 1) % 4;
            let fewer: Vec<&str> = ids
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != other)
                .map(|(_, id)| *id)
                .collect();
            assert_eq!(fewer[rank(&key, &fewer)[0]], ids[first]);
        }
        // Each node gets about a quarter (binomial sd ~27).
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
    }
}
