//! Retries of a change apply it once: a bounded cache of recent request ids
//! (`Idempotency-Key` or `X-Request-Id`) and their answers, per principal, in the manner
//! of the IETF draft "The Idempotency-Key HTTP Header Field". A retry with the same id
//! and the same request gets the first answer again; the same id with another request
//! (method, path or body differ) is refused (422). The oldest entry is forgotten first.

use std::collections::{HashMap, VecDeque};

use hyper::body::Bytes;
use sha2::{Digest as _, Sha256};

/// An answer as sent: status code and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The JSON body.
    pub body: Bytes,
}

/// What the cache knows of a request id.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// A new id: apply the request, then [`Cache::insert`] its answer.
    New,
    /// The same request was answered so.
    Replay(Answer),
    /// The id was used for another request.
    Mismatch,
}

/// The digest of a request: method, path and body.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(path.as_bytes());
    h.update([0]);
    h.update(body);
    h.finalize().into()
}

/// Recent (principal, id) pairs and their answers, at most `capacity`.
pub struct Cache {
    capacity: usize,
    entries: HashMap<(String, String), ([u8; 32], Answer)>,
    order: VecDeque<(String, String)>,
}

impl Cache {
    /// An empty cache of `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// What is known of `id` from `who` for a request of `fingerprint`.
    pub fn seen(&self, who: &str, id: &str, fingerprint: &[u8; 32]) -> Seen {
        match self.entries.get(&(who.to_owned(), id.to_owned())) {
            None => Seen::New,
            Some((f, answer)) if f == fingerprint => Seen::Replay(answer.clone()),
            Some(_) => Seen::Mismatch,
        }
    }

    /// Remembers the answer to `id` from `who`, forgetting the oldest entry when full.
    pub fn insert(&mut self, who: &str, id: &str, fingerprint: [u8; 32], answer: Answer) {
        let key = (who.to_owned(), id.to_owned());
        if self
            .entries
            .insert(key.clone(), (fingerprint, answer))
            .is_none()
        {
            self.order.push_back(key);
        }
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.entries.remove(&old);
            }
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> Answer {
        Answer {
            status: 200,
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn a_retry_is_replayed_and_another_request_under_the_same_id_refused() {
        let mut cache = Cache::new(4);
        let f = fingerprint("POST", "/v1/backend", b"{}");
        assert_eq!(cache.seen("token:a", "id1", &f), Seen::New);
        cache.insert("token:a", "id1", f, answer("first"));
        assert_eq!(
            cache.seen("token:a", "id1", &f),
            Seen::Replay(answer("first"))
        );
        let g = fingerprint("POST", "/v1/backend", b"{\"x\":1}");
        assert_eq!(cache.seen("token:a", "id1", &g), Seen::Mismatch);
        // Ids are per principal.
        assert_eq!(cache.seen("token:b", "id1", &f), Seen::New);
    }

    #[test]
    fn the_oldest_entry_is_forgotten_first() {
        let mut cache = Cache::new(2);
        let f = fingerprint("POST", "/", b"");
        for id in ["a", "b", "c"] {
            cache.insert("w", id, f, answer(id));
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.seen("w", "a", &f), Seen::New);
        assert_eq!(cache.seen("w", "c", &f), Seen::Replay(answer("c")));
    }
}
