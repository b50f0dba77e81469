//! The key names on the wire, their escape, and parsing them back.

use super::*;

/// The names on the wire are DESIGN.md's, braces and all.
#[test]
fn names_follow_the_design() {
    let names = KeyNames::new("", "set", &"EMS0ODMggk1d5N").expect("short id");
    assert_eq!(names.value, b"set:{EMS0ODMggk1d5N}");
    assert_eq!(names.lock, b"lock:set:{EMS0ODMggk1d5N}");
}

/// Ids with braces keep value and lock on one hash tag.
#[test]
fn braces_inside_ids_keep_one_hash_tag() {
    let names = KeyNames::new("", "t", &String::from("a}b{c")).expect("short id");
    let tag = |k: &[u8]| {
        let open = k.iter().position(|&b| b == b'{').expect("open");
        let close = open + k[open..].iter().position(|&b| b == b'}').expect("close");
        k[open + 1..close].to_vec()
    };
    assert_eq!(tag(&names.value), tag(&names.lock));
}

/// An empty id, or one starting with `}` or the escape, is escaped: its tag is never empty,
/// so value and lock share a slot, and every such name parses back to the id.
#[test]
fn ids_that_would_leave_the_tag_empty_are_escaped() {
    for (id, inside) in [
        (&b""[..], &b"\\"[..]),
        (b"}", b"\\}"),
        (b"}x{y}", b"\\}x{y}"),
        (b"\\a", b"\\\\a"),
        (b"a}", b"a}"),
    ] {
        let names = KeyNames::rendered("", "t", id).expect("short id");
        let mut value = b"t:{".to_vec();
        value.extend_from_slice(inside);
        value.push(b'}');
        assert_eq!(names.value, value, "{id:?}");
        assert_eq!(parse_key("", &names.value), Some((KeyKind::Value, "t", id)));
        assert_eq!(parse_key("", &names.lock), Some((KeyKind::Lock, "t", id)));
        let tag = |k: &[u8]| {
            let open = k.iter().position(|&b| b == b'{').expect("open");
            let close = open + k[open..].iter().position(|&b| b == b'}').expect("close");
            k[open + 1..close].to_vec()
        };
        assert!(!tag(&names.value).is_empty(), "{id:?}");
        assert_eq!(tag(&names.value), tag(&names.lock), "{id:?}");
    }
}

/// The published names refuse what the builder refuses.
#[test]
fn published_names_check_their_parts() {
    assert!(key_names(Some("lock"), "t", b"1").is_err());
    assert!(key_names(Some("a:b"), "t", b"1").is_err());
    assert!(key_names(None, "t{", b"1").is_err());
    assert!(key_names(None, "t", &[b'x'; MAX_ID_BYTES + 1]).is_err());
    assert_eq!(
        key_names(Some("ns"), "t", b"1").expect("names"),
        KeyNames::new("ns:", "t", &1u64).expect("names")
    );
}

/// The slot is the cluster's: CRC16/XMODEM of the hash tag (known values from the spec).
#[cfg(feature = "cluster")]
#[test]
fn slots_follow_the_cluster_spec() {
    let names = KeyNames::new("", "t", &String::from("123456789")).expect("short id");
    assert_eq!(names.slot(), 0x31C3, "CRC16(\"123456789\") is 0x31C3");
    let lock = KeyNames {
        value: names.lock.clone(),
        lock: names.lock.clone(),
        others: Vec::new(),
    };
    assert_eq!(
        lock.slot(),
        names.slot(),
        "the value and its lock share a slot"
    );
}

/// Ids over the limit are refused, not truncated.
#[test]
fn long_ids_are_refused() {
    let id = "x".repeat(MAX_ID_BYTES + 1);
    assert!(matches!(
        KeyNames::new("", "t", &id),
        Err(Error::IdTooLong { len, max: MAX_ID_BYTES }) if len == MAX_ID_BYTES + 1
    ));
}

/// Keys parse back into kind, table and id, braces in ids included; other keys do not.
#[test]
fn keys_parse_back() {
    let names = KeyNames::new("", "users", &String::from("a}b{c")).expect("short id");
    assert_eq!(
        parse_key("", &names.value),
        Some((KeyKind::Value, "users", &b"a}b{c"[..]))
    );
    assert_eq!(
        parse_key("", &names.lock),
        Some((KeyKind::Lock, "users", &b"a}b{c"[..]))
    );
    let lock_table = KeyNames::new("", "lock", &7u64).expect("short id");
    assert_eq!(
        parse_key("", &lock_table.value),
        Some((KeyKind::Value, "lock", &b"7"[..]))
    );
    assert_eq!(
        parse_key("", &lock_table.lock),
        Some((KeyKind::Lock, "lock", &b"7"[..]))
    );
    for other in [&b"plain"[..], b"t:noid", b"lock:", b"bad name:{x}"] {
        assert_eq!(parse_key("", other), None, "{other:?}");
    }
    let spaced = KeyNames::new("app:", "users", &5u64).expect("short id");
    assert_eq!(spaced.value, b"app:users:{5}");
    assert_eq!(spaced.lock, b"app:lock:users:{5}");
    assert_eq!(
        parse_key("app:", &spaced.lock),
        Some((KeyKind::Lock, "users", &b"5"[..]))
    );
    assert_eq!(
        parse_key("other:", &spaced.value),
        None,
        "another namespace's key"
    );
    assert_eq!(u64::from_rendered(b"42"), Some(42));
    assert_eq!(String::from_rendered(b"a}b"), Some("a}b".to_string()));
}

/// Only the documented alphabet and lengths are table names.
#[test]
fn table_names_are_validated() {
    for good in ["users", "a", "A-z_0.9", &"n".repeat(64)] {
        assert!(validate_table_name(good).is_ok(), "{good}");
    }
    for bad in ["", "has space", "brace{", "colon:", "ünï", &"n".repeat(65)] {
        assert!(validate_table_name(bad).is_err(), "{bad}");
    }
}

/// A table's marks key parses as its marks, and no id's value key takes its name: the ids that
/// come closest (`}marks`, and the empty id) are escaped.
#[test]
fn the_marks_key_is_no_ids_key() {
    let marks = marks_key_under("app:", "t");
    assert_eq!(marks, b"app:t:{}marks");
    assert_eq!(
        parse_key("app:", &marks),
        Some((KeyKind::Marks, "t", &b""[..]))
    );
    for id in [&b"}marks"[..], b"", b"marks", b"{}marks"] {
        let names = KeyNames::rendered("app:", "t", id).expect("names");
        assert_ne!(names.value, marks, "{id:?}");
        assert_eq!(
            parse_key("app:", &names.value),
            Some((KeyKind::Value, "t", id))
        );
    }
    assert_eq!(marks_key(Some("app"), "t").expect("a key"), marks);
    assert!(marks_key(Some("lock"), "t").is_err() && marks_key(None, "a{b").is_err());
}

/// A schema's suffix follows the id's `}`; splitting it off gives schema 0's key back, whatever
/// braces or `#` the id holds, and the marks key is not split.
#[test]
fn schema_suffixes_split_off_one_to_one() {
    for id in [&b"7"[..], b"a}#1.2", b"}", b"", b"#", b"x}"] {
        let plain = KeyNames::new("", "t", &String::from_utf8_lossy(id).into_owned()).unwrap();
        let schema = plain.clone().in_schema(b"#2.99", [&b""[..]].into_iter());
        assert_eq!(
            split_schema(&schema.value),
            (&plain.value[..], &b"#2.99"[..])
        );
        assert_eq!(split_schema(&schema.lock), (&plain.lock[..], &b"#2.99"[..]));
        assert_eq!(split_schema(&plain.value), (&plain.value[..], &b""[..]));
        assert_eq!(schema.others, vec![plain.value.clone(), plain.lock.clone()]);
    }
    let marks = marks_key_under("", "t");
    assert_eq!(split_schema(&marks), (&marks[..], &b""[..]));
}
