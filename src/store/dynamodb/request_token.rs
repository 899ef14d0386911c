//! The client request token of a commit's `TransactWriteItems`.
//!
//! The same request always gets the same token, so a commit sent again after a lost
//! response is recognised by DynamoDB (for 10 minutes) instead of applied twice. The table,
//! the mode and every field of the request go into the token: DynamoDB answers
//! `IdempotentParameterMismatch` to a token reused with other parameters, so a request that
//! changes (a new `now`, a compressed result) gets a new token.
//!
//! The fields reach SHA-256 as bytes in a prefix-free encoding (each piece tagged or
//! length-prefixed), so two different requests never feed the digest the same bytes. The
//! token only has to be the same for one request within one process (a resent commit), so
//! the encoding is free to change between versions.

use sha2::{Digest, Sha256};

use crate::clock::epoch_ms;
use crate::key::hashing::to_hex;
use crate::store::{Attr, CommitRequest, Item, Write, WriteKind};

/// The token of `request`, committed to `table` (`fresh`: an optimistic commit): 32 hex
/// digits of a SHA-256 over all of it.
pub(crate) fn client_request_token(table: &str, fresh: bool, request: &CommitRequest) -> String {
    let mut m = Material(Sha256::new());
    m.text(table);
    m.tag(u8::from(fresh));
    m.text(request.key.as_str());
    m.text(request.owner.as_str());
    m.text(request.status.as_str());
    m.number(epoch_ms(request.now));
    m.number(request.expiration_secs);
    m.optional(request.validation.as_deref());
    m.text(&request.data);
    m.count(request.writes.len());
    for write in &request.writes {
        m.write(write);
    }
    to_hex(&[], &m.0.finalize()[..16])
}

/// What goes into the digest, piece by piece.
struct Material(Sha256);

impl Material {
    fn tag(&mut self, tag: u8) {
        self.0.update([tag]);
    }

    fn number(&mut self, n: u64) {
        self.0.update(n.to_le_bytes());
    }

    fn count(&mut self, n: usize) {
        // A usize always fits in a u64 on the targets Rust supports; saturate otherwise.
        self.number(u64::try_from(n).unwrap_or(u64::MAX));
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.update(bytes);
    }

    fn text(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }

    fn optional(&mut self, text: Option<&str>) {
        match text {
            None => self.tag(0),
            Some(text) => {
                self.tag(1);
                self.text(text);
            }
        }
    }

    fn texts(&mut self, texts: &[String]) {
        self.count(texts.len());
        for text in texts {
            self.text(text);
        }
    }

    fn item(&mut self, item: &Item) {
        self.count(item.len());
        for (name, value) in item {
            self.text(name);
            self.attr(value);
        }
    }

    fn attr(&mut self, value: &Attr) {
        match value {
            Attr::S(v) => {
                self.tag(0);
                self.text(v);
            }
            Attr::N(v) => {
                self.tag(1);
                self.text(v);
            }
            Attr::B(v) => {
                self.tag(2);
                self.bytes(v);
            }
            Attr::Bool(v) => {
                self.tag(3);
                self.tag(u8::from(*v));
            }
            Attr::Null => self.tag(4),
            Attr::L(items) => {
                self.tag(5);
                self.count(items.len());
                for item in items {
                    self.attr(item);
                }
            }
            Attr::M(map) => {
                self.tag(6);
                self.item(map);
            }
            Attr::Ss(v) => {
                self.tag(7);
                self.texts(v);
            }
            Attr::Ns(v) => {
                self.tag(8);
                self.texts(v);
            }
        }
    }

    fn write(&mut self, write: &Write) {
        self.tag(match write.kind {
            WriteKind::Put => 0,
            WriteKind::Update => 1,
            WriteKind::Delete => 2,
            WriteKind::ConditionCheck => 3,
        });
        self.text(&write.table);
        self.item(&write.item);
        self.optional(write.update_expression.as_deref());
        self.optional(write.condition_expression.as_deref());
        self.count(write.names.len());
        for (placeholder, name) in &write.names {
            self.text(placeholder);
            self.text(name);
        }
        self.item(&write.values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::IdempotencyKey;
    use crate::record::{OwnerToken, Status};
    use std::collections::BTreeMap;
    use std::time::{Duration, SystemTime};

    fn request(now: SystemTime) -> CommitRequest {
        CommitRequest {
            key: IdempotencyKey::derive("t", b"k"),
            owner: OwnerToken::new("owner"),
            now,
            status: Status::Completed,
            data: "1".into(),
            expiration_secs: 100,
            validation: None,
            writes: vec![Write::delete("ledger", [("id", Attr::s("x"))])],
        }
    }

    fn token(request: &CommitRequest) -> String {
        client_request_token("t", false, request)
    }

    #[test]
    fn a_request_token_is_fixed_for_one_request_and_changes_with_any_parameter() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(50);
        let base = request(now);
        assert_eq!(token(&base), token(&base.clone()));
        let later = request(now + Duration::from_millis(1));
        let mut other_data = base.clone();
        other_data.data = "2".into();
        let mut other_writes = base.clone();
        other_writes.writes.clear();
        let mut other_expiry = base.clone();
        other_expiry.expiration_secs += 1;
        let mut other_key = base.clone();
        other_key.key = IdempotencyKey::from_stored("other");
        let mut other_owner = base.clone();
        other_owner.owner = OwnerToken::new("other");
        let mut failed = base.clone();
        failed.status = Status::Failed;
        let mut validated = base.clone();
        validated.validation = Some("v2:hash".into());
        for changed in [
            later,
            other_data,
            other_writes,
            other_expiry,
            other_key,
            other_owner,
            failed,
            validated,
        ] {
            assert_ne!(token(&base), token(&changed));
        }
        assert_ne!(token(&base), client_request_token("t", true, &base));
        assert_ne!(token(&base), client_request_token("u", false, &base));
        assert_eq!(token(&base).len(), 32);
        assert!(token(&base)
            .bytes()
            .all(|b| b"0123456789abcdef".contains(&b)));
    }

    /// Each write differs from the first in one part of a write, including pieces that
    /// would give the same text if they were concatenated without lengths or tags.
    #[test]
    fn a_request_token_changes_with_any_part_of_a_write() {
        let base = Write::update("ledger", [("id", Attr::s("x"))], "ADD #b :a")
            .condition("attribute_exists(id)")
            .name("#b", "balance")
            .value(":a", Attr::n(1));
        let map = |pairs: &[(&str, Attr)]| -> BTreeMap<String, Attr> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect()
        };
        let mut variants = vec![
            Write::put("ledger", [("id", Attr::s("x"))]),
            Write::delete("ledger", [("id", Attr::s("x"))]),
            Write::condition_check("ledger", [("id", Attr::s("x"))], "ADD #b :a"),
        ];
        let mut tweak = |change: &dyn Fn(&mut Write)| {
            let mut write = base.clone();
            change(&mut write);
            variants.push(write);
        };
        tweak(&|w| w.table = "ledge".into());
        tweak(&|w| w.item = map(&[("id", Attr::n("x"))]));
        tweak(&|w| w.item = map(&[("i", Attr::s("dx"))]));
        tweak(&|w| w.item = map(&[("id", Attr::s("x")), ("y", Attr::Null)]));
        tweak(&|w| w.item = map(&[("id", Attr::Ss(vec!["x".into()]))]));
        tweak(&|w| w.item = map(&[("id", Attr::Ns(vec!["x".into()]))]));
        tweak(&|w| w.item = map(&[("id", Attr::B(b"x".to_vec()))]));
        tweak(&|w| w.item = map(&[("id", Attr::L(vec![Attr::s("x")]))]));
        tweak(&|w| w.item = map(&[("id", Attr::M(map(&[("x", Attr::Null)])))]));
        tweak(&|w| w.item = map(&[("id", Attr::Bool(true))]));
        tweak(&|w| w.item = map(&[("id", Attr::Bool(false))]));
        tweak(&|w| w.update_expression = None);
        tweak(&|w| w.condition_expression = None);
        tweak(&|w| w.condition_expression = Some(String::new()));
        tweak(&|w| {
            w.names.clear();
        });
        tweak(&|w| w.names = [("#b".into(), "balanc".into())].into());
        tweak(&|w| w.names = [("#".into(), "bbalance".into())].into());
        tweak(&|w| w.values = map(&[(":a", Attr::s("1"))]));
        let tokens: Vec<String> = std::iter::once(&base)
            .chain(&variants)
            .map(|write| {
                let mut r = request(SystemTime::UNIX_EPOCH);
                r.writes = vec![write.clone()];
                token(&r)
            })
            .collect();
        let distinct: std::collections::HashSet<&String> = tokens.iter().collect();
        assert_eq!(distinct.len(), tokens.len(), "{tokens:?}");
    }

    #[test]
    fn pieces_moved_between_fields_change_the_token() {
        let mut a = request(SystemTime::UNIX_EPOCH);
        a.data = "ab".into();
        a.validation = Some(String::new());
        let mut b = a.clone();
        b.data = "b".into();
        b.validation = Some("a".into());
        let mut c = a.clone();
        c.validation = None;
        assert_ne!(token(&a), token(&b));
        assert_ne!(token(&a), token(&c));
    }
}
