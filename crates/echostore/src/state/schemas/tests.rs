//! What a schema's names hold for writes before and after it settles, and when a process may
//! settle on its generation (against a real Valkey).
use super::*;

/// Another schema's copies are dropped by writes (schema 0's always), never its own; a
/// schema 0 table's names are a table's without schemas.
#[test]
fn a_write_names_every_other_live_schema() {
    let schemas = Schemas::new("", "t", 2);
    let members = [
        "1:55:abc".to_owned(),
        "0:7:def".to_owned(),
        "1:55:x".to_owned(),
    ];
    let live = schemas.learned("99", &members);
    assert_eq!(live.own, b"#2.99");
    assert_eq!(live.others, vec![b"".to_vec(), b"#1.55".to_vec()]);

    let zero = Schemas::new("", "t", 0);
    let plain = KeyNames::new("", "t", &7u64).unwrap();
    assert_eq!(zero.names(plain.clone(), false), plain);
    assert_eq!(
        zero.learned("5", &members[..1]).others,
        vec![b"#1.55".to_vec()]
    );
}

/// A process whose keys moved (it first joined, or its lease lapsed) keeps copies of its own
/// until it settles on its generation; its writes meanwhile drop the generation's copy too, so
/// that once settled it never reads there a copy older than its own write. Settled, its
/// writes drop the generation's copy no more (they write it).
#[test]
fn a_write_before_settling_drops_the_generations_copy() {
    let schemas = Schemas::new("", "t", 2);
    let learned = schemas.learned("99", &["1:55:abc".to_owned()]);
    let private = learned.private(schemas.private());
    assert_eq!(private.own, schemas.private());
    *schemas.live.write().unwrap() = Arc::new(private);
    let plain = KeyNames::new("", "t", &7u64).unwrap();
    let generation_copy = [plain.value.clone(), b"#2.99".to_vec()].concat();
    let write = schemas.names(plain.clone(), true);
    assert!(
        write.others.contains(&generation_copy),
        "a private write leaves the generation's copy: {:?}",
        write.others
    );
    let settled = schemas.live().settled(b"#2.99".to_vec());
    *schemas.live.write().unwrap() = Arc::new(settled);
    let write = schemas.names(plain, true);
    assert_eq!(write.value, generation_copy);
    assert!(
        !write.others.contains(&generation_copy),
        "a write drops its own copy"
    );
}

/// Renews `schemas` (after `beside`, if any, each round) until `until` holds of its answer,
/// which it returns.
async fn renew_until(
    schemas: &Schemas,
    beside: Option<&Schemas>,
    l2: &L2,
    until: impl Fn(&Renewed) -> bool,
) -> Renewed {
    loop {
        if let Some(beside) = beside {
            beside.renew(l2).await.expect("a renewal");
        }
        let renewed = schemas.renew(l2).await.expect("a renewal");
        if until(&renewed) {
            return renewed;
        }
        tokio::time::sleep(RENEW_EVERY).await;
    }
}

/// A process of schema 1 settles on its generation only once the process of schema 0 has
/// renewed since it began; and when Valkey loses the live schemas (a restart empties them),
/// the new generation it starts waits for that process to come back and renew, however old
/// it grows meanwhile: until it has, that process still writes as if the generation did not
/// exist, and its writes would not drop the copies made there. (Found by `echostore check
/// --faults all --tracking keys`: after the outage fault a schema-1 read returned a copy that
/// schema 0's puts had not dropped; the old rule settled at once, seeing no other schema live.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_is_settled_on_only_once_every_writer_has_heard_of_it() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    let store = crate::Store::builder()
        .valkey(valkey.url())
        .coherence(false);
    let store = store.build().await.expect("a store");
    let l2 = store.l2().expect("a valkey").clone();
    let (writer, reader) = (Schemas::new("", "t", 0), Schemas::new("", "t", 1));
    let plain = KeyNames::new("", "t", &7u64).unwrap();
    writer.renew(&l2).await.unwrap();
    assert!(!writer.is_private(), "schema 0 has nothing to settle");

    let joined = reader.renew(&l2).await.unwrap();
    assert!(
        joined.moved && !joined.heard,
        "the writer renewed before it began"
    );
    assert!(!reader.settle(&joined));
    let old = |r: &Renewed| r.heard && r.age >= 2 * RENEW_EVERY;
    let heard = renew_until(&reader, Some(&writer), &l2, old).await;
    assert!(reader.settle(&heard), "heard of, and two renewals old");
    let generation = reader.names(plain.clone(), false).value;

    let mut raw = redis::Client::open(valkey.url()).unwrap();
    let _: () = redis::Commands::del(&mut raw, &reader.key).unwrap();
    let anew = renew_until(&reader, None, &l2, |r| r.age >= 2 * RENEW_EVERY).await;
    assert!(
        !anew.others_live && !anew.heard,
        "the writer seen before is missing"
    );
    assert!(
        !reader.settle(&anew),
        "not while the writer may not know the generation"
    );
    assert_eq!(
        reader.names(plain.clone(), false).value,
        plain
            .value
            .iter()
            .chain(&reader.private())
            .copied()
            .collect::<Vec<u8>>()
    );
    writer.renew(&l2).await.unwrap();
    let back = reader.renew(&l2).await.unwrap();
    assert!(
        back.heard && reader.settle(&back),
        "the writer is back and heard of it"
    );
    assert_ne!(
        reader.names(plain, false).value,
        generation,
        "a new generation"
    );
}
