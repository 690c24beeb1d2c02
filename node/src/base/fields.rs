//! A hash's string fields, as pure rules: a field whose value is not an
//! integer is the register of the field's column (as a key's string is
//! the register of the empty column), changed through agreement, each
//! change a function of the registers decided so far. A field holds one
//! kind: a counter (the hash's counter cell of that column) or a string.
//! The RESP commands of hashes (`client::resp::hashes`) are made of these.

use tally_engine::is_reserved;
use tally_net::wire::{Register, Registers};

use super::zset;

/// Whether `column` names a hash's field: not the key's own string (the
/// empty column) and not a column the node keeps for itself.
pub(crate) fn is_field(column: &[u8]) -> bool {
    !column.is_empty() && !is_reserved(column)
}

/// The string fields of `registers` live at `now_ms`, in column order.
pub(crate) fn fields(registers: &Registers, now_ms: u64) -> impl Iterator<Item = &Register> {
    registers
        .0
        .iter()
        .filter(move |r| is_field(&r.column) && !r.expired(now_ms))
}

/// What setting a string field did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FieldSet {
    /// Whether it set the value (`only_absent` allowed it).
    pub(crate) applied: bool,
    /// Whether the field held a string before.
    pub(crate) existed: bool,
}

/// `column` set to `value` (only where it holds none, with
/// `only_absent`), with no deadline: the next registers and what it did.
pub(crate) fn set_field(
    registers: &Registers,
    (column, value): (&[u8], &[u8]),
    only_absent: bool,
    now_ms: u64,
) -> (Registers, FieldSet) {
    let existed = registers.get(column, now_ms).is_some();
    if existed && only_absent {
        let done = FieldSet {
            applied: false,
            existed,
        };
        return (registers.clone(), done);
    }
    let mut next = registers.clone();
    next.put(Register {
        column: column.to_vec(),
        value: value.to_vec(),
        at_ms: 0,
    });
    let done = FieldSet {
        applied: true,
        existed,
    };
    (next, done)
}

/// `registers` without the string fields `columns`: the next registers
/// and, for each column, whether it held a live string.
pub(crate) fn remove_fields(
    registers: &Registers,
    columns: &[Vec<u8>],
    now_ms: u64,
) -> (Registers, Vec<bool>) {
    let mut next = registers.clone();
    let removed = columns
        .iter()
        .map(|c| {
            let live = is_field(c) && next.get(c, now_ms).is_some();
            if is_field(c) {
                next.remove(c);
            }
            live
        })
        .collect();
    (next, removed)
}

/// Whether `column` is a client's register: the key's string, a string
/// field, or the key's sorted set (not the node's own, like the rounds).
fn is_clients(column: &[u8]) -> bool {
    !is_reserved(column) || column == zset::COLUMN
}

/// Whether `registers` hold a client's register (the key's string, a
/// string field or its sorted set) live at `now_ms`: what [`clear`]
/// would take.
pub(crate) fn holds_any(registers: &Registers, now_ms: u64) -> bool {
    registers
        .0
        .iter()
        .any(|r| is_clients(&r.column) && !r.expired(now_ms))
}

/// `registers` without any client's register (the key's string, every
/// string field and its sorted set; the node's own, like the rounds,
/// stay): the next registers and whether one was live.
pub(crate) fn clear(registers: &Registers, now_ms: u64) -> (Registers, bool) {
    let had = holds_any(registers, now_ms);
    let mut next = registers.clone();
    next.0.retain(|r| !is_clients(&r.column));
    (next, had)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn reg(column: &str, value: &str, at_ms: u64) -> Register {
        Register {
            column: column.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            at_ms,
        }
    }

    fn rounds() -> Register {
        Register {
            column: b"\xff\xffrounds".to_vec(),
            value: vec![1, 0, 0, 0, 0, 0, 0, 0],
            at_ms: 0,
        }
    }

    #[test]
    fn fields_are_the_live_registers_of_named_columns() {
        let r = Registers(vec![
            reg("", "s", 0),
            reg("a", "x", 0),
            reg("b", "y", NOW),
            rounds(),
        ]);
        let names: Vec<_> = fields(&r, NOW).map(|r| r.column.clone()).collect();
        assert_eq!(names, vec![b"a".to_vec()]);
    }

    #[test]
    fn set_keeps_nx_and_says_whether_the_field_existed() {
        let none = Registers::default();
        let (one, done) = set_field(&none, (b"f", b"word"), false, NOW);
        assert_eq!(
            done,
            FieldSet {
                applied: true,
                existed: false
            }
        );
        assert_eq!(one, Registers(vec![reg("f", "word", 0)]));
        let (same, done) = set_field(&one, (b"f", b"other"), true, NOW);
        assert_eq!(
            (same, done),
            (
                one.clone(),
                FieldSet {
                    applied: false,
                    existed: true
                }
            )
        );
        let (two, done) = set_field(&one, (b"f", b"other"), false, NOW);
        assert_eq!(
            done,
            FieldSet {
                applied: true,
                existed: true
            }
        );
        assert_eq!(two, Registers(vec![reg("f", "other", 0)]));
    }

    #[test]
    fn remove_and_clear_touch_only_what_clients_wrote() {
        let r = Registers(vec![
            reg("", "s", 0),
            reg("a", "x", 0),
            reg("b", "y", NOW),
            rounds(),
        ]);
        let cols = [
            b"a".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
            b"\xff\xffrounds".to_vec(),
        ];
        let (next, removed) = remove_fields(&r, &cols, NOW);
        assert_eq!(removed, vec![true, false, false, false]);
        assert_eq!(next, Registers(vec![reg("", "s", 0), rounds()]));
        let (cleared, had) = clear(&r, NOW);
        assert_eq!((cleared, had), (Registers(vec![rounds()]), true));
        assert!(!clear(&Registers(vec![rounds()]), NOW).1);
    }
}
