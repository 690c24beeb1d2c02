//! The `[cluster.ids]` table: how long operation ids are remembered (see
//! `tally_engine::ids` for what is kept); and whose they are.
//!
//! # Per user
//!
//! On a node with users, a client id is the logged-in user's own: the node
//! that takes the add (the coordinator) turns `(user, client id)` into the
//! id the ledger knows ([`user_client`]) before anything else sees it, so
//! two users who pick the same client id make two adds, and neither can be
//! answered, refused or expired by the other's. The rule depends on the
//! user name and the client id only (no per-node or random key), so every
//! coordinator and every replica derives the same id, before and after a
//! restart. Without users, ids are as the client gave them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The `[cluster.ids]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ids {
    /// A retry of an add with an id is answered for this long after the
    /// add; later it is refused as "outcome unknown".
    pub window_ms: u64,
    /// A client's ids read as expired this long after its last add to a
    /// counter; after that, the counter no longer knows the client.
    pub forget_ms: u64,
    /// The same for a client that made one add only (a one-off id; at most
    /// `forget_ms` counts): it is forgotten sooner, so one-off clients do
    /// not fill the budget.
    pub one_add_forget_ms: u64,
    /// The most clients a node remembers ids of: an add with the id of a
    /// client it does not know is refused past it, as not applied.
    pub clients_max: usize,
}

impl Default for Ids {
    fn default() -> Self {
        let r = tally_engine::Retention::default();
        Ids {
            window_ms: r.window_ms,
            forget_ms: r.forget_ms,
            one_add_forget_ms: r.one_add_forget_ms,
            clients_max: r.clients_max,
        }
    }
}

impl Ids {
    /// Checks the table; an error names the key (under `cluster.ids.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.window_ms == 0 {
            return Err(("window_ms", "must be > 0".into()));
        }
        if self.forget_ms < self.window_ms {
            return Err((
                "forget_ms",
                format!("must be at least window_ms ({})", self.window_ms),
            ));
        }
        if self.clients_max == 0 {
            return Err(("clients_max", "must be > 0".into()));
        }
        Ok(())
    }

    /// The engine's retention.
    pub fn retention(&self) -> tally_engine::Retention {
        tally_engine::Retention {
            window_ms: self.window_ms,
            forget_ms: self.forget_ms,
            one_add_forget_ms: self.one_add_forget_ms,
            clients_max: self.clients_max,
        }
    }
}

/// The first byte of a user's client id as the ledger knows it; the rest
/// is a SHA-256, so the whole is 33 bytes, within the client id limit.
const USER_CLIENT_TAG: u8 = 0xff;
/// Separates this use of SHA-256 from any other.
const USER_CLIENT_DOMAIN: &[u8] = b"tally operation id of a user, v1\0";

/// The client id the ledger knows for `client` given by `user` (`None`:
/// the node has no users, and the id is as given).
///
/// `user` is length-prefixed before the client id is hashed, so no choice
/// of client id makes one user's input another's (`("ab", "c")` and
/// `("a", "bc")` differ); finding two inputs with one output means
/// breaking SHA-256.
pub fn user_client<'a>(user: Option<&str>, client: &'a [u8]) -> Cow<'a, [u8]> {
    let Some(user) = user else {
        return Cow::Borrowed(client);
    };
    let len = u32::try_from(user.len()).unwrap_or(u32::MAX);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(USER_CLIENT_DOMAIN);
    ctx.update(&len.to_le_bytes());
    ctx.update(user.as_bytes());
    ctx.update(client);
    let mut id = Vec::with_capacity(33);
    id.push(USER_CLIENT_TAG);
    id.extend_from_slice(ctx.finish().as_ref());
    Cow::Owned(id)
}

/// An add's operation id as the ledger knows it (see [`user_client`]).
pub fn user_op_id(user: Option<&str>, id: tally_net::once::OpId) -> tally_net::once::OpId {
    match user_client(user, &id.client) {
        Cow::Borrowed(_) => id,
        Cow::Owned(client) => tally_net::once::OpId {
            client,
            seq: id.seq,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn without_users_a_client_id_is_as_given() {
        assert!(matches!(
            user_client(None, b"web-7"),
            Cow::Borrowed(b"web-7")
        ));
        let id = tally_net::once::OpId::new(b"web-7".to_vec(), 3).expect("a good id");
        assert_eq!(user_op_id(None, id.clone()), id);
    }

    #[test]
    fn a_users_client_id_is_its_own_and_the_same_everywhere() {
        let a = user_client(Some("alice"), b"web-7");
        // Fixed forever: ledgers on disk and other nodes hold it.
        assert_eq!(
            hex(&a),
            "ff068a8370da597137c9cbe64ef2d1fd2780475df46fba8f8dc377ccaaed357488"
        );
        assert_eq!(a.len(), 33);
        assert!(a.len() <= tally_net::once::CLIENT_ID_BYTES_MAX);
        assert_eq!(a[0], USER_CLIENT_TAG);
        assert_ne!(a, user_client(Some("bob"), b"web-7"));
        assert_ne!(&*a, b"web-7");
        // Where the user name ends is part of the input.
        assert_ne!(user_client(Some("ab"), b"c"), user_client(Some("a"), b"bc"));
        assert_ne!(
            user_client(Some("a"), b"\x01"),
            user_client(Some("a\x01"), b"")
        );
        let id = tally_net::once::OpId::new(b"web-7".to_vec(), 3).expect("a good id");
        let mine = user_op_id(Some("alice"), id);
        assert_eq!((mine.client.as_slice(), mine.seq), (&*a, 3));
        assert!(mine.check().is_ok());
    }
}
