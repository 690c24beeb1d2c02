//! Redis' databases: `SELECT` picks a connection's keyspace, and every
//! command's keys are put in it before the command runs (see `keyspace`).
//!
//! The command table says where a command's keys are, so the commands
//! themselves never see a database: [`in_keyspace`] gives them the keys as
//! stored. In database 0 that is the keys as they are, checked.

use std::borrow::Cow;

use super::proto::Reply;
use crate::base::commands::Command;
use crate::base::keyspace::{DATABASES, Keyspace};

/// `SELECT index`'s database, or Redis' error.
pub(crate) fn select(index: &[u8]) -> Result<u8, Reply> {
    let n: i64 = std::str::from_utf8(index)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Reply::err("ERR value is not an integer or out of range"))?;
    u8::try_from(n)
        .ok()
        .filter(|db| *db < DATABASES)
        .ok_or_else(|| Reply::err("ERR DB index is out of range"))
}

/// `args` (the command `cmd`'s words, its name first) with each of its
/// keys as stored in `space`; a key that has no place there is Redis' error for it.
pub(crate) fn in_keyspace<'a>(
    cmd: &Command,
    args: &'a [Vec<u8>],
    space: Keyspace,
) -> Result<Cow<'a, [Vec<u8>]>, Reply> {
    let refused = |e: crate::base::keyspace::Refused| Reply::err(format!("ERR {e}"));
    if space == Keyspace::DEFAULT {
        for i in cmd.key_positions(args.len()) {
            Keyspace::check(&args[i]).map_err(refused)?;
        }
        return Ok(Cow::Borrowed(args));
    }
    let mut stored = args.to_vec();
    for i in cmd.key_positions(args.len()) {
        stored[i] = space.stored(&args[i]).map_err(refused)?;
    }
    Ok(Cow::Owned(stored))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn c(name: &str) -> &'static Command {
        crate::base::commands::find(name).unwrap()
    }

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn err(r: Reply) -> String {
        match r {
            Reply::Error(e) => e.to_string(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn select_takes_0_to_15_as_redis_does() {
        assert_eq!(select(b"0").unwrap(), 0);
        assert_eq!(select(b"15").unwrap(), 15);
        assert_eq!(
            err(select(b"16").unwrap_err()),
            "ERR DB index is out of range"
        );
        assert_eq!(
            err(select(b"-1").unwrap_err()),
            "ERR DB index is out of range"
        );
        assert_eq!(
            err(select(b"one").unwrap_err()),
            "ERR value is not an integer or out of range"
        );
        assert!(select(b"99999999999999999999").is_err());
    }

    #[test]
    fn keys_and_only_keys_are_put_in_the_keyspace() {
        let db2 = Keyspace {
            db: 2,
            generation: 0,
        };
        let k = |key: &str| db2.stored(key.as_bytes()).unwrap();
        let (mset, hincrby, del, ping) = (
            words("mset a 1 b 2"),
            words("hincrby h f 5"),
            words("del a b c"),
            words("ping x"),
        );
        let mset = in_keyspace(c("mset"), &mset, db2).unwrap();
        assert_eq!(
            mset.as_ref(),
            [
                b"mset".to_vec(),
                k("a"),
                b"1".to_vec(),
                k("b"),
                b"2".to_vec()
            ]
        );
        let hincrby = in_keyspace(c("hincrby"), &hincrby, db2).unwrap();
        assert_eq!(hincrby[1], k("h"));
        assert_eq!(hincrby[2], b"f");
        let del = in_keyspace(c("del"), &del, db2).unwrap();
        assert_eq!(&del[1..], [k("a"), k("b"), k("c")]);
        let ping = in_keyspace(c("ping"), &ping, db2).unwrap();
        assert_eq!(ping.as_ref(), words("ping x"));
        assert!(matches!(
            in_keyspace(c("get"), &words("get a"), Keyspace::DEFAULT).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn keys_that_have_no_place_get_a_clear_error() {
        let reserved = vec![b"get".to_vec(), vec![0xFF, b'x']];
        assert!(
            err(in_keyspace(c("get"), &reserved, Keyspace::DEFAULT).unwrap_err())
                .contains("reserved")
        );
        let long = vec![b"incr".to_vec(), vec![b'a'; 1025]];
        let db5 = Keyspace {
            db: 5,
            generation: 0,
        };
        assert!(err(in_keyspace(c("incr"), &long, db5).unwrap_err()).contains("the limit is 1024"));
    }
}
