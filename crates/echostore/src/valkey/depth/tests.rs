//! Unit tests of `depth`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;

/// An enum that boxes itself: the shape a hostile payload exploits.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Nest {
    Leaf,
    Deeper(Box<Nest>),
}

impl Nest {
    /// `levels` enum levels: `levels - 1` times `Deeper`, then `Leaf`.
    fn of(levels: usize) -> Nest {
        (1..levels).fold(Nest::Leaf, |inner, _| Nest::Deeper(Box::new(inner)))
    }
}

/// A tree through sequences, options, maps and newtypes.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Tree(Option<BTreeMap<u8, Vec<Tree>>>);

/// Decodes all of `bytes` as a `T` with a budget of `max` levels.
fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    max: usize,
) -> (Result<T, postcard::Error>, bool) {
    let budget = Budget::new(max);
    let mut de = postcard::Deserializer::from_bytes(bytes);
    let value = T::deserialize(Limited::new(&mut de, &budget));
    (value, budget.exceeded())
}

/// postcard's bytes for a `Nest` `levels` deep, written directly (no deep value is built):
/// variant 1 (`Deeper`) `levels - 1` times, then variant 0 (`Leaf`).
fn nest_bytes(levels: usize) -> Vec<u8> {
    let mut bytes = vec![1u8; levels - 1];
    bytes.push(0);
    bytes
}

/// The hand-written bytes are what postcard writes.
#[test]
fn nest_bytes_are_postcards() {
    let written = postcard::to_allocvec(&Nest::of(5)).expect("encodes");
    assert_eq!(written, nest_bytes(5));
}

/// A value nested exactly to the limit decodes, to the same value; one level more fails and
/// says the limit was the reason.
#[test]
fn the_limit_is_exact() {
    let (at_limit, exceeded) = decode::<Nest>(&nest_bytes(10), 10);
    assert_eq!(at_limit.expect("at the limit"), Nest::of(10));
    assert!(!exceeded);
    let (over, exceeded) = decode::<Nest>(&nest_bytes(11), 10);
    assert!(over.is_err());
    assert!(exceeded, "the budget tells the limit was hit");
}

/// Every kind of compound takes a level: sequences, maps, options, newtypes, tuples, structs.
#[test]
fn every_compound_counts() {
    // Vec<Vec<Vec<u8>>>: three sequences.
    let bytes = postcard::to_allocvec(&vec![vec![vec![1u8]]]).expect("encodes");
    assert!(decode::<Vec<Vec<Vec<u8>>>>(&bytes, 3).0.is_ok());
    assert!(decode::<Vec<Vec<Vec<u8>>>>(&bytes, 2).1);
    // Tree(Some({1: [Tree(None)]})): newtype, Some, map, seq, newtype = 5.
    let tree = Tree(Some(BTreeMap::from([(1, vec![Tree(None)])])));
    let bytes = postcard::to_allocvec(&tree).expect("encodes");
    assert_eq!(decode::<Tree>(&bytes, 5).0.expect("5 levels"), tree);
    assert!(decode::<Tree>(&bytes, 4).1);
    // A struct holding a tuple holding an Option: struct, tuple, Some = 3.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        pair: (u8, Option<u8>),
    }
    let holder = Holder { pair: (1, Some(2)) };
    let bytes = postcard::to_allocvec(&holder).expect("encodes");
    assert_eq!(decode::<Holder>(&bytes, 3).0.expect("3 levels"), holder);
    assert!(decode::<Holder>(&bytes, 2).1);
}

/// Levels are given back when a compound ends: siblings never add up, however many.
#[test]
fn siblings_do_not_add_up() {
    let wide: Vec<Vec<u8>> = (0..10_000).map(|i| vec![i as u8]).collect();
    let bytes = postcard::to_allocvec(&wide).expect("encodes");
    assert_eq!(decode::<Vec<Vec<u8>>>(&bytes, 2).0.expect("two deep"), wide);
    let many: Vec<Nest> = (0..1000).map(|_| Nest::of(3)).collect();
    let bytes = postcard::to_allocvec(&many).expect("encodes");
    assert_eq!(decode::<Vec<Nest>>(&bytes, 4).0.expect("1 + 3 deep"), many);
}

/// A payload a million levels deep is refused on a small stack: the decode stops at the
/// limit, so neither decoding nor dropping what was built recurses a million times.
#[test]
fn a_million_deep_payload_is_refused_on_a_small_stack() {
    let bytes = nest_bytes(1_000_000);
    let refused = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let (value, exceeded) = decode::<Nest>(&bytes, 128);
            value.is_err() && exceeded
        })
        .expect("thread")
        .join()
        .expect("no stack overflow");
    assert!(refused);
}

/// A value at the default limit (128) decodes and drops within a quarter of a Tokio worker's
/// 2 MiB stack, even in a debug build.
#[test]
fn the_limit_fits_a_small_stack() {
    let bytes = nest_bytes(128);
    let decoded = std::thread::Builder::new()
        .stack_size(512 << 10)
        .spawn(move || decode::<Nest>(&bytes, 128).0.is_ok())
        .expect("thread")
        .join()
        .expect("no stack overflow");
    assert!(decoded);
}

/// Malformed input still fails as postcard says, not as a depth error.
#[test]
fn other_errors_are_not_depth_errors() {
    let (value, exceeded) = decode::<Nest>(&[1, 1, 7], 128);
    assert!(value.is_err());
    assert!(!exceeded);
}
