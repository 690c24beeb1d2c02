//! The engine's refusals in Redis' words: the one place the node turns a
//! typed [`Refusal`] into the text a Redis client expects. Native clients
//! and peers get the same text (it is what the wire always carried).

use tally_engine::Refusal;
use tally_net::wire::{ErrorKind, WireError};

/// Redis' error for a command on a key of the other kind.
pub(crate) const WRONGTYPE: &str = redis(Refusal::WrongType);

/// The message of an add its leader refused, nothing applied, because
/// its key holds a string (an agreed value): the RESP layer makes the add
/// to the string through agreement instead (an older node answers it as
/// `WRONGTYPE`).
pub(crate) const HOLDS_STRING: &str = "the key holds a string; an add to it is agreed";

/// The error of an add refused because its key holds a string.
pub(crate) fn holds_string() -> WireError {
    WireError::not_applied(ErrorKind::WrongType, HOLDS_STRING)
}

/// Whether `e` is [`holds_string`]'s.
pub(crate) fn is_holds_string(e: &WireError) -> bool {
    e.kind == ErrorKind::WrongType && e.message == HOLDS_STRING
}

/// Redis' text for `refusal`, its error prefix first.
pub(crate) const fn redis(refusal: Refusal) -> &'static str {
    match refusal {
        Refusal::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value",
        Refusal::NoSuchKey => "ERR no such key",
        Refusal::IndexOutOfRange => "ERR index out of range",
    }
}

/// The wire's kind of error for `refusal`.
pub(crate) const fn kind(refusal: Refusal) -> ErrorKind {
    match refusal {
        Refusal::WrongType => ErrorKind::WrongType,
        Refusal::NoSuchKey | Refusal::IndexOutOfRange => ErrorKind::Invalid,
    }
}

/// The refusal whose Redis text an error message is, if any: a refusal
/// travels between nodes as its text, and the RESP layer answers it as
/// is.
pub(crate) fn of_text(message: &str) -> Option<Refusal> {
    [
        Refusal::WrongType,
        Refusal::NoSuchKey,
        Refusal::IndexOutOfRange,
    ]
    .into_iter()
    .find(|&r| redis(r) == message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_redis_text_and_kind_and_is_read_back() {
        let table = [
            (
                Refusal::WrongType,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                ErrorKind::WrongType,
            ),
            (Refusal::NoSuchKey, "ERR no such key", ErrorKind::Invalid),
            (
                Refusal::IndexOutOfRange,
                "ERR index out of range",
                ErrorKind::Invalid,
            ),
        ];
        for (refusal, text, k) in table {
            assert_eq!(redis(refusal), text);
            assert_eq!(kind(refusal), k);
            assert_eq!(of_text(text), Some(refusal));
        }
        assert_eq!(of_text("ERR something else"), None);
        assert_eq!(of_text("no such key"), None, "the engine's own words");
    }
}
