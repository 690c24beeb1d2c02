#![allow(clippy::unwrap_used, reason = "tests")]

use std::cmp::Ordering;

use proptest::prelude::*;

use super::*;

/// A value of `ty` from random bytes: the right size, and for a
/// timeuuid version 1.
fn value(ty: &CqlType, raw: &[u8]) -> Vec<u8> {
    let mut v = raw.to_vec();
    let size = match ty {
        CqlType::Uuid | CqlType::Timeuuid => Some(16),
        CqlType::Varint => None,
        CqlType::Ascii | CqlType::Varchar | CqlType::Blob | CqlType::Inet => None,
        ty => match form(ty) {
            Form::Signed(n) | Form::Raw(n) | Form::Float(n) => Some(n),
            _ => None,
        },
    };
    if let Some(n) = size {
        v.resize(n, 0x5A);
    }
    match ty {
        CqlType::Timeuuid => v[6] = 0x10 | (v[6] & 0x0F),
        CqlType::Uuid if raw.first().is_some_and(|b| b & 1 == 0) => {
            v[6] = 0x10 | (v[6] & 0x0F); // half of them version 1
        }
        CqlType::Varint if v.is_empty() => v.push(0),
        CqlType::Boolean => v[0] &= 1,
        _ => {}
    }
    v
}

const TYPES: [CqlType; 15] = [
    CqlType::Int,
    CqlType::Bigint,
    CqlType::Smallint,
    CqlType::Tinyint,
    CqlType::Timestamp,
    CqlType::Time,
    CqlType::Date,
    CqlType::Boolean,
    CqlType::Float,
    CqlType::Double,
    CqlType::Uuid,
    CqlType::Timeuuid,
    CqlType::Varint,
    CqlType::Varchar,
    CqlType::Blob,
];

/// Few distinct bytes, so that equal values and shared prefixes come up.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            Just(0u8),
            Just(0xFF),
            Just(0x80),
            Just(0x7F),
            Just(1),
            any::<u8>()
        ],
        0..10,
    )
}

proptest! {
    #[test]
    fn bytes_sort_as_the_values_do_and_decode_back(
        ty in 0..TYPES.len(),
        descending in any::<bool>(),
        a in bytes(),
        b in bytes(),
        tail in bytes(),
    ) {
        let ty = &TYPES[ty];
        let types = [(ty, descending)];
        let (a, b) = (value(ty, &a), value(ty, &b));
        let ea = encode(&types, std::slice::from_ref(&a)).unwrap();
        let eb = encode(&types, std::slice::from_ref(&b)).unwrap();
        let mut want = compare(ty, &a, &b);
        if descending {
            want = want.reverse();
        }
        prop_assert_eq!(ea.cmp(&eb), want, "{:?} {:?} {:?}", ty, a, b);
        // Decoded back to an equal value, whatever follows it.
        let (back, used) = decode(&types, &[&ea[..], &tail[..]].concat()).unwrap();
        prop_assert_eq!(used, ea.len());
        prop_assert_eq!(compare(ty, &back[0], &a), Ordering::Equal);
        // A column's name after the values never changes their order.
        let (na, nb) = ([&ea[..], b"z"].concat(), [&eb[..], b"a"].concat());
        if want != Ordering::Equal {
            prop_assert_eq!(na.cmp(&nb), want);
        }
    }

    #[test]
    fn a_sequence_sorts_by_its_first_value_then_the_next(
        t1 in 0..TYPES.len(),
        t2 in 0..TYPES.len(),
        d1 in any::<bool>(),
        d2 in any::<bool>(),
        a in (bytes(), bytes()),
        b in (bytes(), bytes()),
    ) {
        let types = [(&TYPES[t1], d1), (&TYPES[t2], d2)];
        let va = vec![value(&TYPES[t1], &a.0), value(&TYPES[t2], &a.1)];
        let vb = vec![value(&TYPES[t1], &b.0), value(&TYPES[t2], &b.1)];
        let by = |i: usize, d: bool| {
            let o = compare(types[i].0, &va[i], &vb[i]);
            if d { o.reverse() } else { o }
        };
        let want = by(0, d1).then(by(1, d2));
        let (ea, eb) = (encode(&types, &va).unwrap(), encode(&types, &vb).unwrap());
        prop_assert_eq!(ea.cmp(&eb), want);
        let (back, used) = decode(&types, &ea).unwrap();
        prop_assert_eq!(used, ea.len());
        prop_assert_eq!(back.len(), 2);
        // Every row of a prefix lies before the prefix's end.
        let first = encode(&types[..1], &va[..1]).unwrap();
        prop_assert!(ea.starts_with(&first));
        prop_assert!(ea < after_prefix(&first));
        prop_assert!(eb.starts_with(&first) || eb < first || eb >= after_prefix(&first));
    }
}

#[test]
fn values_of_the_wrong_size_are_refused_and_odd_bytes_do_not_decode() {
    let int = [(&CqlType::Int, false)];
    assert_eq!(encode(&int, &[vec![0, 1]]), None);
    assert_eq!(encode(&[(&CqlType::Timeuuid, false)], &[vec![0; 15]]), None);
    assert_eq!(encode(&[(&CqlType::Varint, false)], &[vec![]]), None);
    assert_eq!(decode(&int, &[0x40, 0x80, 0]), None, "short");
    assert_eq!(decode(&int, &[0x41, 0x80, 0, 0, 0]), None, "not a value");
    let text = [(&CqlType::Varchar, false)];
    assert_eq!(decode(&text, &[0x40, b'a', 0, 7]), None, "a bad escape");
    assert_eq!(decode(&text, &[0x40, b'a']), None, "no end");
    let e = encode(&text, &[b"a\0b".to_vec()]).unwrap();
    assert_eq!(e, [0x40, b'a', 0, 0xFF, b'b', 0, 0]);
    assert_eq!(decode(&text, &e), Some((vec![b"a\0b".to_vec()], e.len())));
    // Varints decode to their shortest form.
    let varint = [(&CqlType::Varint, false)];
    for (v, short) in [
        (vec![0, 0, 5], vec![5]),
        (vec![0, 0x80], vec![0, 0x80]),
        (vec![0xFF, 0xFF], vec![0xFF]),
        (vec![0xFF, 0x7F], vec![0xFF, 0x7F]),
        (vec![0], vec![0]),
    ] {
        let e = encode(&varint, &[v]).unwrap();
        assert_eq!(decode(&varint, &e).unwrap().0, [short]);
    }
    assert_eq!(after_prefix(&[0x40, 1, 0xFF, 0xFF]), [0x40, 2]);
    assert_eq!(after_prefix(&[0x40]), [0x41]);
}

#[test]
fn values_order_by_their_type() {
    let int = |v: i32| v.to_be_bytes().to_vec();
    assert_eq!(compare(&CqlType::Int, &int(-1), &int(1)), Ordering::Less);
    assert_eq!(compare(&CqlType::Tinyint, &[0xFF], &[1]), Ordering::Less);
    assert_eq!(compare(&CqlType::Varchar, b"b", b"ab"), Ordering::Greater);
    // A timeuuid by its time: the low time bytes come first.
    let at = |low: u8, high: u8| {
        let mut u = [0u8; 16];
        u[3] = low;
        u[6] = 0x10 | high;
        u
    };
    assert_eq!(
        compare(&CqlType::Timeuuid, &at(9, 0), &at(1, 1)),
        Ordering::Less
    );
}
