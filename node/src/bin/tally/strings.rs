//! `tally set` and `tally get` of strings, `tally cas`, and `tally lease`:
//! a key's string, read and changed through agreement (client protocol
//! 3), so a compare-and-set or a lease is linearizable through any node.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tally_net::wire::{Deadline, StringCondition, WireString, WireSwapped};
use tally_net::{Client, ClientError};

use super::{Failure, Target};

/// A lease's subcommand.
#[derive(clap::Subcommand)]
pub(crate) enum LeaseCmd {
    /// Take the lease NAME for OWNER, if nobody else holds it (its holder
    /// takes it again, for a new --ttl).
    Acquire {
        /// The lease (a key).
        name: String,
        /// Who takes it.
        owner: String,
        /// Seconds it is held, from when a node takes it.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
    },
    /// Hold OWNER's lease NAME for --ttl seconds more, if OWNER still holds it.
    Renew {
        /// The lease (a key).
        name: String,
        /// Its holder.
        owner: String,
        /// Seconds it is held, from when a node takes the renewal.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
    },
    /// Give up OWNER's lease NAME, if OWNER holds it.
    Release {
        /// The lease (a key).
        name: String,
        /// Its holder.
        owner: String,
    },
}

/// The client strings go through: any node agrees on them.
fn client(target: &Target) -> Result<&Client, ClientError> {
    match target {
        Target::One(c) => Ok(c),
        Target::Ring(c) => c.any(),
    }
}

/// The key's string, if it holds one.
pub(crate) async fn get(target: &Target, key: &str) -> Result<Option<WireString>, Failure> {
    let c = client(target).map_err(Failure::other)?;
    c.get_string(key.as_bytes()).await.map_err(Failure::other)
}

/// Prints a string `tally get` read.
pub(crate) fn print_string(json: bool, key: &str, s: &WireString) {
    let value = String::from_utf8_lossy(&s.value);
    if json {
        println!(
            "{}",
            json!({ "key": key, "string": value, "deadline_ms": s.at_ms })
        );
    } else {
        println!("{value}");
    }
}

/// `tally set KEY VALUE` of a string: `--nx` only where there is none.
pub(crate) async fn set(
    json: bool,
    target: &Target,
    key: &str,
    value: &str,
    (ttl, nx): (Option<u64>, bool),
) -> Result<(), Failure> {
    let c = client(target).map_err(Failure::write)?;
    let condition = match nx {
        true => StringCondition::Absent,
        false => StringCondition::Always,
    };
    let deadline = ttl.map_or(Deadline::Never, |s| Deadline::After(s.saturating_mul(1000)));
    let done = c
        .set_string(key.as_bytes(), Some(value.as_bytes()), condition, deadline)
        .await
        .map_err(Failure::write)?;
    if json {
        println!("{}", json!({ "key": key, "set": done.applied }));
    }
    match done.applied {
        true if !json => println!("OK"),
        true => {}
        false => return Err(refused(format!("{key} {}", holds(&done)))),
    }
    Ok(())
}

/// `tally cas KEY EXPECTED NEW`: the string swapped if it is EXPECTED.
pub(crate) async fn cas(
    json: bool,
    target: &Target,
    key: &str,
    (expected, new): (&str, &str),
) -> Result<(), Failure> {
    let c = client(target).map_err(Failure::write)?;
    let condition = StringCondition::Equals(expected.as_bytes().to_vec());
    let done = c
        .set_string(
            key.as_bytes(),
            Some(new.as_bytes()),
            condition,
            Deadline::Keep,
        )
        .await
        .map_err(Failure::write)?;
    if json {
        println!("{}", json!({ "key": key, "swapped": done.applied }));
    } else if done.applied {
        println!("swapped");
    }
    match done.applied {
        true => Ok(()),
        false => Err(refused(format!("not swapped: {key} {}", holds(&done)))),
    }
}

/// `tally lease ...`.
pub(crate) async fn lease(json: bool, target: &Target, cmd: &LeaseCmd) -> Result<(), Failure> {
    let c = client(target).map_err(Failure::write)?;
    let secs = |ttl: u64| Duration::from_secs(ttl);
    let (name, owner, done) = match cmd {
        LeaseCmd::Acquire { name, owner, ttl } => {
            let done = c.lease_acquire(name.as_bytes(), owner.as_bytes(), secs(*ttl));
            (name, owner, done.await)
        }
        LeaseCmd::Renew { name, owner, ttl } => {
            let done = c.lease_renew(name.as_bytes(), owner.as_bytes(), secs(*ttl));
            (name, owner, done.await)
        }
        LeaseCmd::Release { name, owner } => {
            let done = c.lease_release(name.as_bytes(), owner.as_bytes());
            (name, owner, done.await)
        }
    };
    let done = done.map_err(Failure::write)?;
    if json {
        let holder = done
            .before
            .as_ref()
            .map(|b| String::from_utf8_lossy(&b.value).into_owned());
        println!(
            "{}",
            json!({ "lease": name, "owner": owner, "applied": done.applied, "holder_before": holder })
        );
    } else if done.applied {
        println!("OK");
    }
    match done.applied {
        true => Ok(()),
        false => Err(refused(format!("lease {name}: {}", holds(&done)))),
    }
}

/// What the string before was, in words: who holds it, and for how long.
fn holds(done: &WireSwapped) -> String {
    let Some(before) = &done.before else {
        return "holds nothing".into();
    };
    let value = String::from_utf8_lossy(&before.value);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    match before.at_ms {
        0 => format!("holds {value:?}"),
        at => format!(
            "holds {value:?} for {} s more",
            at.saturating_sub(now).div_ceil(1000)
        ),
    }
}

/// A change whose condition did not hold: nothing was written.
fn refused(why: String) -> Failure {
    Failure::condition(anyhow::anyhow!(why))
}
