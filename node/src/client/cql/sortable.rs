//! Clustering values as bytes that sort as the values do: how a table
//! made once the cluster has feature `row-slices` stores its rows, so that
//! a partition's cells sort in clustering order and a page, or a range of
//! rows, is a range of columns (`cluster::slice`).
//!
//! ```text
//! clustering := for each value: 0x40, its bytes by type below,
//!               each byte inverted for a DESC column
//! fixed size : int, bigint, smallint, tinyint, timestamp, time, counter:
//!              big-endian, the sign bit flipped
//!              date, boolean: as they are
//!              float, double: the sign bit flipped, or every bit if it is set
//!              uuid: version (1 byte), a version 1's time (8, else 0), the 16 bytes
//!              timeuuid: its time (8), then the 16 bytes each with 0x80 flipped
//! varint     : 0x01 (zero or more) | 0x00, length (u16; 0xFFFF - it if
//!              negative), the bytes without the sign's fill
//! others     : the bytes with each 0x00 as 0x00 0xFF, then 0x00 0x00
//! ```
//!
//! Every value's bytes end where its type says (a fixed size, a length,
//! the end mark), so no value's bytes are a prefix of another's, and the
//! bytes of a sequence of values sort as the values do, each by
//! [`compare`], Cassandra's order (checked against it in the tests). A column begins
//! with 0x40 when the table has clustering columns, never with a static
//! column's 0xFD or a deleted range's 0xFE.

use std::cmp::Ordering;

use super::result::CqlType;

/// The byte each value begins with.
pub(crate) const VALUE: u8 = 0x40;

/// The bytes of `values` (of clustering columns `types`, each with
/// whether it is DESC), in order; `None` if a value has the wrong size
/// for its type.
pub(crate) fn encode(types: &[(&CqlType, bool)], values: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(values.iter().map(|v| v.len() + 4).sum());
    for ((ty, descending), v) in types.iter().zip(values) {
        out.push(VALUE);
        let from = out.len();
        put(&mut out, ty, v)?;
        if *descending {
            out[from..].iter_mut().for_each(|b| *b = !*b);
        }
    }
    Some(out)
}

/// The values `bytes` begins with (one per type), and how many bytes
/// they take; `None` if it does not begin with them.
pub(crate) fn decode(types: &[(&CqlType, bool)], bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let mut at = 0;
    let mut values = Vec::with_capacity(types.len());
    for (ty, descending) in types {
        if bytes.get(at) != Some(&VALUE) {
            return None;
        }
        at += 1;
        let rest = &bytes[at..];
        let (value, used) = match descending {
            false => take(ty, rest)?,
            true => {
                let inverted: Vec<u8> = rest.iter().map(|b| !b).collect();
                take(ty, &inverted)?
            }
        };
        values.push(value);
        at += used;
    }
    Some((values, at))
}

/// The first bytes after every string that begins with `prefix` (not
/// all 0xFF): the end of the range of columns of the rows it names.
pub(crate) fn after_prefix(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xFF) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// How a type's values become bytes that sort as they do.
#[derive(Clone, Copy)]
enum Form {
    /// Big-endian signed, of this size: the sign bit flipped.
    Signed(usize),
    /// As they are, of this size.
    Raw(usize),
    /// IEEE, of this size: the sign bit flipped, or every bit if set.
    Float(usize),
    Uuid,
    Timeuuid,
    Varint,
    /// Any bytes: escaped, and ended.
    Escaped,
}

fn form(ty: &CqlType) -> Form {
    match ty {
        CqlType::Tinyint => Form::Signed(1),
        CqlType::Smallint => Form::Signed(2),
        CqlType::Int => Form::Signed(4),
        CqlType::Bigint | CqlType::Timestamp | CqlType::Time | CqlType::Counter => Form::Signed(8),
        CqlType::Boolean => Form::Raw(1),
        CqlType::Date => Form::Raw(4),
        CqlType::Float => Form::Float(4),
        CqlType::Double => Form::Float(8),
        CqlType::Uuid => Form::Uuid,
        CqlType::Timeuuid => Form::Timeuuid,
        CqlType::Varint => Form::Varint,
        _ => Form::Escaped,
    }
}

/// Appends `v` (of type `ty`) ascending.
fn put(out: &mut Vec<u8>, ty: &CqlType, v: &[u8]) -> Option<()> {
    let fixed = |n: usize| (v.len() == n).then_some(());
    match form(ty) {
        Form::Signed(n) => {
            fixed(n)?;
            out.push(v[0] ^ 0x80);
            out.extend_from_slice(&v[1..]);
        }
        Form::Raw(n) => {
            fixed(n)?;
            out.extend_from_slice(v);
        }
        Form::Float(n) => {
            fixed(n)?;
            out.extend(float_bits(v, v[0] & 0x80 != 0));
        }
        Form::Uuid => {
            fixed(16)?;
            let version = v[6] >> 4;
            out.push(version);
            let time = if version == 1 { time_of(v) } else { 0 };
            out.extend_from_slice(&time.to_be_bytes());
            out.extend_from_slice(v);
        }
        Form::Timeuuid => {
            fixed(16)?;
            out.extend_from_slice(&time_of(v).to_be_bytes());
            out.extend(v.iter().map(|b| b ^ 0x80));
        }
        Form::Varint => put_varint(out, v)?,
        Form::Escaped => {
            for &b in v {
                out.push(b);
                if b == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0, 0]);
        }
    }
    Some(())
}

/// The value of type `ty` that `bytes` (ascending) begins with, and how
/// many bytes it takes.
fn take(ty: &CqlType, bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    match form(ty) {
        Form::Signed(n) => {
            let mut v = bytes.get(..n)?.to_vec();
            v[0] ^= 0x80;
            Some((v, n))
        }
        Form::Raw(n) => Some((bytes.get(..n)?.to_vec(), n)),
        Form::Float(n) => {
            let v = bytes.get(..n)?;
            Some((float_bits(v, v[0] & 0x80 == 0).collect(), n))
        }
        Form::Uuid => Some((bytes.get(9..25)?.to_vec(), 25)),
        Form::Timeuuid => {
            let v = bytes.get(8..24)?.iter().map(|b| b ^ 0x80).collect();
            Some((v, 24))
        }
        Form::Varint => take_varint(bytes),
        Form::Escaped => take_escaped(bytes),
    }
}

/// A float's bits flipped one way (they are their own inverse): every
/// bit of a `negative` one, else the sign bit.
fn float_bits(v: &[u8], negative: bool) -> impl Iterator<Item = u8> + '_ {
    v.iter()
        .enumerate()
        .map(move |(i, &b)| match (negative, i) {
            (true, _) => !b,
            (false, 0) => b ^ 0x80,
            (false, _) => b,
        })
}

/// The escaped bytes `bytes` begins with, unescaped, and how many bytes
/// they take with their end.
fn take_escaped(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut v = Vec::new();
    let mut i = 0;
    loop {
        match (bytes.get(i)?, bytes.get(i + 1)) {
            (0, Some(0)) => return Some((v, i + 2)),
            (0, Some(0xFF)) => {
                v.push(0);
                i += 2;
            }
            (0, _) => return None,
            (&b, _) => {
                v.push(b);
                i += 1;
            }
        }
    }
}

/// A version 1 UUID's 60-bit time.
fn time_of(v: &[u8]) -> u64 {
    u64::from(v[6] & 0x0F) << 56
        | u64::from(v[7]) << 48
        | u64::from(v[4]) << 40
        | u64::from(v[5]) << 32
        | u64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

/// Appends a varint (big-endian two's complement): its sign, its length
/// without the sign's fill (inverted if negative), those bytes.
fn put_varint(out: &mut Vec<u8>, v: &[u8]) -> Option<()> {
    let negative = v.first()? & 0x80 != 0;
    let fill = if negative { 0xFF } else { 0 };
    let trimmed: Vec<u8> = v.iter().copied().skip_while(|&b| b == fill).collect();
    let len = u16::try_from(trimmed.len()).ok()?;
    out.push(u8::from(!negative));
    let len = if negative { u16::MAX - len } else { len };
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&trimmed);
    Some(())
}

/// The varint `bytes` begins with (its shortest form), and its size.
fn take_varint(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let (&sign, rest) = bytes.split_first()?;
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let negative = match sign {
        0 => true,
        1 => false,
        _ => return None,
    };
    let len = u16::from_be_bytes(*len);
    let len = usize::from(if negative { u16::MAX - len } else { len });
    let trimmed = rest.get(..len)?;
    let fill: u8 = if negative { 0xFF } else { 0 };
    // The sign's fill again, where the first byte would read as the
    // other sign.
    let needs_fill = match trimmed.first() {
        None => true,
        Some(&b) => (b & 0x80 != 0) != negative,
    };
    let mut v = Vec::with_capacity(len + 1);
    if needs_fill {
        v.push(fill);
    }
    v.extend_from_slice(trimmed);
    Some((v, 3 + len))
}

/// How two values of `ty` order, as Cassandra orders them.
pub(crate) fn compare(ty: &CqlType, a: &[u8], b: &[u8]) -> Ordering {
    match ty {
        CqlType::Int
        | CqlType::Bigint
        | CqlType::Smallint
        | CqlType::Tinyint
        | CqlType::Timestamp
        | CqlType::Time
        | CqlType::Counter => signed(a).cmp(&signed(b)).then_with(|| a.cmp(b)),
        CqlType::Varint => varint(a).cmp(&varint(b)),
        CqlType::Float => float32(a).total_cmp(&float32(b)),
        CqlType::Double => float64(a).total_cmp(&float64(b)),
        CqlType::Timeuuid => timeuuid(a).cmp(&timeuuid(b)),
        CqlType::Uuid => uuid(a).cmp(&uuid(b)),
        _ => a.cmp(b),
    }
}

/// A varint (big-endian two's complement, any length) as its sign, its
/// magnitude's length and its bytes, which order as the number does.
fn varint(b: &[u8]) -> (bool, usize, Vec<u8>) {
    let negative = b.first().is_some_and(|&x| x & 0x80 != 0);
    let fill = if negative { 0xFF } else { 0 };
    let trimmed: Vec<u8> = b.iter().copied().skip_while(|&x| x == fill).collect();
    match negative {
        // Of two negatives, the longer is the smaller.
        true => (false, usize::MAX - trimmed.len(), trimmed),
        false => (true, trimmed.len(), trimmed),
    }
}

/// A float of 4 bytes (0 for another size).
fn float32(b: &[u8]) -> f32 {
    b.try_into().map_or(0.0, f32::from_be_bytes)
}

/// A double of 8 bytes (0 for another size).
fn float64(b: &[u8]) -> f64 {
    b.try_into().map_or(0.0, f64::from_be_bytes)
}

/// A big-endian signed integer of up to 8 bytes, sign-extended.
pub(crate) fn signed(b: &[u8]) -> i64 {
    match b.first() {
        None => 0,
        Some(&first) => {
            let fill = if first & 0x80 != 0 { 0xFF } else { 0 };
            let mut be = [fill; 8];
            let n = b.len().min(8);
            be[8 - n..].copy_from_slice(&b[b.len() - n..]);
            i64::from_be_bytes(be)
        }
    }
}

/// A version 1 UUID's timestamp (60 bits), then its bytes signed, as
/// Cassandra's `TimeUUIDType` orders them.
fn timeuuid(b: &[u8]) -> (u64, Vec<i8>) {
    let t = match b {
        [l0, l1, l2, l3, m0, m1, h0, h1, ..] => {
            u64::from(h0 & 0x0F) << 56
                | u64::from(*h1) << 48
                | u64::from(*m0) << 40
                | u64::from(*m1) << 32
                | u64::from(u32::from_be_bytes([*l0, *l1, *l2, *l3]))
        }
        _ => 0,
    };
    (t, b.iter().map(|&x| x as i8).collect())
}

/// Cassandra's `UUIDType` order: by version, then a version 1 by its
/// time, then the bytes.
fn uuid(b: &[u8]) -> (u8, u64, Vec<u8>) {
    let version = b.get(6).map_or(0, |v| v >> 4);
    let time = match version {
        1 => timeuuid(b).0,
        _ => 0,
    };
    (version, time, b.to_vec())
}

#[cfg(test)]
mod tests;
