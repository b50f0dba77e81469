//! Unit tests of `envelope`.
use super::*;
use crate::valkey::codec::MAX_DEPTH;
use crate::valkey::header::{HeaderError, LONGEST_HEADER, WRITTEN_AT};

/// An unmarked write, as most of these tests make.
fn encode<V: Serialize>(
    value: &V,
    fresh_until_ms: u64,
    written_at_ms: u64,
    delta: Duration,
    version: Option<u64>,
    max_bytes: usize,
) -> Result<Vec<u8>> {
    let blank = Marking::default();
    super::encode(
        value,
        &Stamp {
            fresh_until_ms,
            written_at_ms,
            delta,
            version,
        },
        &blank,
        &Coding::default(),
        max_bytes,
    )
}

/// A marked write carries its generation and tags, with or without a version; an unmarked
/// one keeps formats 2 and 3, byte for byte.
#[test]
fn marked_writes_round_trip_and_blank_ones_keep_the_old_formats() {
    let marking = Marking {
        generation: 1_764_600_000_123_456,
        tags: vec!["tenant:42".into(), String::new()],
    };
    for (version, format) in [(None, 4), (Some(9), 5)] {
        let bytes = super::encode(
            &"v",
            &Stamp {
                fresh_until_ms: 2_000,
                written_at_ms: 1_000,
                delta: Duration::ZERO,
                version,
            },
            &marking,
            &Coding::default(),
            1 << 10,
        )
        .expect("encodes");
        assert_eq!(bytes[0], format);
        let header = decode_header(&bytes).expect("a header");
        assert_eq!(
            (header.version, header.generation),
            (version, Some(marking.generation))
        );
        let env: Envelope<String> = decode(&bytes, 1 << 24, None).expect("decodes");
        assert_eq!((env.value.as_str(), &env.marking), ("v", &marking));
    }
    let blank = super::encode(
        &"v",
        &Stamp {
            fresh_until_ms: 2,
            written_at_ms: 1,
            delta: Duration::ZERO,
            version: None,
        },
        &Marking::default(),
        &Coding::default(),
        1 << 10,
    );
    assert_eq!(
        blank.expect("encodes"),
        encode(&"v", 2, 1, Duration::ZERO, None, 1 << 10).expect("encodes")
    );
    assert_eq!(
        encode(&"v", 2, 1, Duration::ZERO, None, 1 << 10).expect("encodes")[0],
        2
    );
    let tagged_only = Marking {
        generation: 0,
        tags: vec!["t".into()],
    };
    let bytes = super::encode(
        &"v",
        &Stamp {
            fresh_until_ms: 2,
            written_at_ms: 1,
            delta: Duration::ZERO,
            version: None,
        },
        &tagged_only,
        &Coding::default(),
        1 << 10,
    )
    .expect("encodes");
    assert_eq!(
        decode::<String>(&bytes, 1 << 24, None)
            .expect("decodes")
            .marking,
        tagged_only
    );
}

/// Valkey's restamped `fresh_until` and `written_at` do not change an envelope's
/// fingerprint; any other byte does.
#[test]
fn fingerprints_ignore_the_stamps_valkey_puts_in() {
    let bytes = encode(&"v", 2_000, 1_000, Duration::ZERO, None, 1 << 10).expect("encode");
    let mut restamped = bytes.clone();
    restamped[1..WRITTEN_AT].copy_from_slice(&6_000u64.to_le_bytes());
    restamped[WRITTEN_AT..HEADER_1].copy_from_slice(&5_000u64.to_le_bytes());
    assert_eq!(fingerprint(&bytes), fingerprint(&restamped));
    let mut other_load = bytes.clone();
    other_load[HEADER_1] ^= 1;
    assert_ne!(fingerprint(&bytes), fingerprint(&other_load));
    let mut other_value = bytes.clone();
    *other_value.last_mut().expect("a payload") ^= 1;
    assert_ne!(fingerprint(&bytes), fingerprint(&other_value));
}

/// A value survives the round trip with its timestamps.
#[test]
fn round_trips() {
    let delta = Duration::from_micros(61_234);
    let value = ("hello".to_string(), 7u32);
    let bytes = encode(&value, 2000, 1000, delta, None, 1 << 20).expect("encodes");
    assert_eq!(bytes[0], 2);
    let env: Envelope<(String, u32)> = decode(&bytes, 1 << 24, None).expect("decodes");
    assert_eq!(env.value, ("hello".to_string(), 7));
    assert_eq!((env.fresh_until_ms, env.written_at_ms), (2000, 1000));
    assert_eq!(env.delta, delta);
    assert!(env.is_fresh(1999) && !env.is_fresh(2000));
    let versioned = encode(&value, 2000, 1000, delta, Some(9), 1 << 20).expect("encodes");
    assert_eq!(versioned[0], 3);
    assert_eq!(decode_header(&versioned).expect("header").version, Some(9));
    let env: Envelope<(String, u32)> = decode(&versioned, 1 << 24, None).expect("decodes");
    assert_eq!((env.value, env.delta), (value, delta));
}

/// An envelope of format 1 (no `delta`) still decodes, with a delta of zero; a load too long
/// for the field saturates.
#[test]
fn format_1_decodes_and_delta_saturates() {
    let mut old = vec![1u8];
    old.extend_from_slice(&2000u64.to_le_bytes());
    old.extend_from_slice(&1000u64.to_le_bytes());
    old.extend(postcard::to_allocvec(&"old".to_string()).expect("encodes"));
    let env: Envelope<String> = decode(&old, 1 << 24, None).expect("format 1 decodes");
    assert_eq!(
        (
            env.value.as_str(),
            env.fresh_until_ms,
            env.written_at_ms,
            env.delta
        ),
        ("old", 2000, 1000, Duration::ZERO)
    );
    let long = encode(&1u8, 2, 1, Duration::from_secs(1 << 40), None, 1 << 20).expect("encodes");
    let env: Envelope<u8> = decode(&long, 1 << 24, None).expect("decodes");
    assert_eq!(env.delta, Duration::from_micros(u64::from(u32::MAX)));
}

/// Truncated, foreign and mistyped bytes are errors, never panics.
#[test]
fn bad_bytes_are_errors() {
    let bytes = encode(
        &"a long enough string".to_string(),
        1,
        1,
        Duration::ZERO,
        None,
        1 << 20,
    )
    .expect("encodes");
    for cut in 0..bytes.len() {
        let _ = decode::<String>(&bytes[..cut], 1 << 24, None);
    }
    assert!(matches!(
        decode::<String>(&bytes[..5], 1 << 24, None),
        Err(DecodeError::Header(HeaderError::Short { len: 5, .. }))
    ));
    let mut foreign = bytes.clone();
    foreign[0] = 9;
    assert!(matches!(
        decode::<String>(&foreign, 1 << 24, None),
        Err(DecodeError::Header(HeaderError::Format(9)))
    ));
    let number = encode(&300u32, 1, 1, Duration::ZERO, None, 1 << 20).expect("encodes");
    assert!(
        decode::<String>(&number, 1 << 24, None).is_err(),
        "a number is not a string"
    );
    assert!(matches!(
        decode::<u8>(&bytes, 1 << 24, None),
        Err(DecodeError::Trailing(_))
    ));
}

/// A self-boxing value nested past `MAX_DEPTH` is `TooDeep`; one at the limit round-trips.
#[test]
fn nesting_past_the_limit_is_too_deep() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Nest {
        Leaf,
        Deeper(Box<Nest>),
    }
    let nest =
        |levels: usize| (1..levels).fold(Nest::Leaf, |inner, _| Nest::Deeper(Box::new(inner)));
    let at_limit = encode(&nest(MAX_DEPTH), 2, 1, Duration::ZERO, None, 1 << 20).expect("encodes");
    assert_eq!(
        decode::<Nest>(&at_limit, 1 << 24, None)
            .expect("at the limit")
            .value,
        nest(MAX_DEPTH)
    );
    let over = encode(&nest(MAX_DEPTH + 1), 2, 1, Duration::ZERO, None, 1 << 20).expect("encodes");
    assert!(matches!(
        decode::<Nest>(&over, 1 << 24, None),
        Err(DecodeError::TooDeep(MAX_DEPTH))
    ));
    // Planted bytes a million levels deep: refused, no overflow.
    let mut planted = over[..LONGEST_HEADER].to_vec();
    planted.extend(std::iter::repeat_n(1u8, 999_999));
    planted.push(0);
    assert!(matches!(
        decode::<Nest>(&planted, 1 << 24, None),
        Err(DecodeError::TooDeep(MAX_DEPTH))
    ));
}

/// An encoding over the limit is refused with its size.
#[test]
fn over_the_limit_is_too_large() {
    let big = vec![7u8; 100];
    assert!(matches!(
        encode(&big, 1, 1, Duration::ZERO, None, 50),
        Err(Error::TooLarge { size, max: 50 }) if size > 100
    ));
}

/// JSON and LZ4 are recorded in the format byte's high bits and read back whatever the reader's
/// own settings; a compressed payload that declares more than the reader's limit is refused.
#[test]
fn coded_payloads_round_trip_and_bombs_are_refused() {
    let value = ("a row".repeat(500), 7u32);
    for (codec, compress_above, bits) in [
        (crate::Codec::Postcard, None, 0),
        (crate::Codec::Json, None, crate::valkey::codec::JSON),
        (crate::Codec::Postcard, Some(16), crate::valkey::codec::LZ4),
        (
            crate::Codec::Json,
            Some(16),
            crate::valkey::codec::JSON | crate::valkey::codec::LZ4,
        ),
    ] {
        let coding = Coding {
            codec: codec.clone(),
            compress_above,
        };
        let stamp = Stamp {
            fresh_until_ms: 2,
            written_at_ms: 1,
            delta: Duration::ZERO,
            version: Some(3),
        };
        let bytes =
            super::encode(&value, &stamp, &Marking::default(), &coding, 1 << 20).expect("encodes");
        assert_eq!(bytes[0], 3 | bits, "{codec:?} {compress_above:?}");
        let header = decode_header(&bytes).expect("header");
        assert_eq!(
            (header.format, header.coding, header.version),
            (3, bits, Some(3))
        );
        let env: Envelope<(String, u32)> = decode(&bytes, 1 << 20, None).expect("decodes");
        assert_eq!(env.value, value);
        if bits & crate::valkey::codec::LZ4 != 0 {
            assert!(matches!(
                decode::<(String, u32)>(&bytes, 100, None),
                Err(DecodeError::Compressed(_))
            ));
        }
    }
    let mut unknown = encode(&"v", 2, 1, Duration::ZERO, None, 1 << 10).expect("encodes");
    unknown[0] |= 0x80;
    assert!(
        decode::<String>(&unknown, 1 << 10, None).is_err(),
        "an unknown coding bit"
    );
}
