//! Logging in over RESP: `AUTH [user] password` and `HELLO ... AUTH user
//! password`, and what a connection is told when it may not run a command.
//!
//! As Redis: `AUTH password` logs in as `default`; a wrong password is
//! `-WRONGPASS` (after the delay `auth` imposes), a command before any
//! login `-NOAUTH`, a command the role forbids `-NOPERM`. Without users
//! the connection is already `default`, which takes any password, as a
//! Redis without `requirepass`.

use super::proto::Reply;
use super::session::Session;
use crate::security::auth::{Auth, Refusal};

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// `AUTH`'s reply.
pub(crate) async fn auth(
    auth: &Auth,
    s: &mut Session,
    rest: &[Vec<u8>],
    peer: Option<std::net::SocketAddr>,
) -> Reply {
    let (user, password): (&[u8], &[u8]) = match rest {
        [password] => (b"default", password),
        [user, password] => (user, password),
        [] => return super::session::arity("auth"),
        _ => return Reply::err("ERR syntax error"),
    };
    if !auth.has_users() {
        return match rest.len() {
            1 => Reply::err(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ),
            _ if user == b"default" => Reply::Simple("OK"),
            _ => Reply::err(WRONGPASS),
        };
    }
    match log_in(auth, s, user, password, peer).await {
        true => Reply::Simple("OK"),
        false => Reply::err(WRONGPASS),
    }
}

/// Before `HELLO` answers: logs in if it carries `AUTH user password`;
/// without that, a connection not logged in is refused. Anything else
/// wrong with the command is left for `HELLO` itself to say.
pub(crate) async fn hello(
    auth: &Auth,
    s: &mut Session,
    rest: &[Vec<u8>],
    peer: Option<std::net::SocketAddr>,
) -> Result<(), Reply> {
    let valid_version = rest
        .first()
        .and_then(|v| std::str::from_utf8(v).ok())
        .is_some_and(|v| matches!(v, "2" | "3"));
    let credentials = if valid_version {
        auth_option(&rest[1..])
    } else {
        None
    };
    match credentials {
        Some((user, password)) if auth.has_users() => {
            if log_in(auth, s, user, password, peer).await {
                Ok(())
            } else {
                Err(Reply::err(WRONGPASS))
            }
        }
        Some((user, _)) if user != b"default" => Err(Reply::err(WRONGPASS)),
        Some(_) => Ok(()),
        None if s.login.check(crate::security::auth::Need::Read) == Err(Refusal::NoAuth) => {
            Err(Reply::err(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
            ))
        }
        None => Ok(()),
    }
}

/// The user and password of `HELLO`'s options, if it has `AUTH`.
fn auth_option(options: &[Vec<u8>]) -> Option<(&[u8], &[u8])> {
    let mut i = 0;
    while i < options.len() {
        let left = options.len() - i - 1;
        match options[i].to_ascii_lowercase().as_slice() {
            b"auth" if left >= 2 => return Some((&options[i + 1], &options[i + 2])),
            b"setname" if left >= 1 => i += 2,
            _ => return None,
        }
    }
    None
}

async fn log_in(
    auth: &Auth,
    s: &mut Session,
    user: &[u8],
    password: &[u8],
    peer: Option<std::net::SocketAddr>,
) -> bool {
    match (std::str::from_utf8(user), std::str::from_utf8(password)) {
        (Ok(user), Ok(password)) => s.login.login(auth, user, password, peer).await,
        _ => {
            s.login.refuse().await;
            false
        }
    }
}

/// What a command the connection may not run gets instead.
pub(crate) fn refusal(r: Refusal, s: &Session, name: &str) -> Reply {
    match r {
        Refusal::NoAuth => Reply::err("NOAUTH Authentication required."),
        Refusal::NoPerm(_) => Reply::err(format!(
            "NOPERM User {} has no permissions to run the '{name}' command",
            s.login.user().unwrap_or("default")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split_whitespace()
            .map(|w| w.as_bytes().to_vec())
            .collect()
    }

    #[test]
    fn hello_finds_its_auth_option() {
        let got = |line| auth_option(&words(line)).map(|(u, p)| (u.to_vec(), p.to_vec()));
        assert_eq!(got("AUTH u p"), Some((b"u".to_vec(), b"p".to_vec())));
        assert_eq!(
            got("SETNAME x auth u p"),
            Some((b"u".to_vec(), b"p".to_vec()))
        );
        assert_eq!(got("SETNAME x"), None);
        assert_eq!(got("AUTH u"), None);
        assert_eq!(got("BOGUS AUTH u p"), None);
    }
}
