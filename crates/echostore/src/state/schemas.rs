//! `.schema(n)`: a table's schema, and the live schemas of the table as Valkey knows them, so that
//! two versions of a service whose cached type differs can run side by side (a rolling deploy).
//!
//! Each schema keeps copies of its own: its value and lock keys carry `#<schema>.<generation>`
//! after the id's `}`; schema 0's carry nothing (its keys are those of a table without schemas).
//! No process ever decodes another schema's bytes, and each schema's fills hold their own lock, so
//! there is one source read per id per expiry per schema.
//!
//! A write reaches every schema: a put, invalidate, delete (and a failed write's repair) drops the
//! value and lock of every other live schema in the same script as its own (they share the id's
//! hash slot), and schema 0's always. Every process of the table hears of that `DEL` as of any
//! change of its own key. A fill writes its own schema's copy only, since the other schemas'
//! copies hold the same source row: no invalidation goes back and forth. Clears and tags are marks
//! of the table, which every schema reads.
//!
//! The live schemas are a sorted set `[<ns>:]schemas:<table>` of `<schema>:<generation>:<token>`,
//! one member per process, scored by when its lease ends on Valkey's clock. Each process renews
//! its own every [`RENEW_EVERY`] and learns the others from the answer; a process that stops
//! renewing drops out after [`LEASE`]. A schema's generation is chosen when it joins with no
//! process of it left, so its copies from an earlier life, which other schemas' writes no longer
//! reached, are never read again. Valkey coming back empty is not such a life's end: a renewal
//! that finds its own member gone before its lease's end puts back every schema it last heard
//! that has no member left, so the generations stay and no process's keys move. A generation is used only once
//! every other live process has heard of it (two renewals after it started): a table that starts
//! or joins a younger one waits before it serves, and a process whose lease lapsed keeps copies
//! only it reads meanwhile ([`Schemas::settle`]), its writes dropping the generation's copy it
//! will move onto. A write
//! trusts what its process heard only while it is recent and no connection was lost since
//! ([`Heard`]): Valkey may have come back empty and another schema begun a generation.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::valkey::l2::L2;
use crate::wire::key::{KeyNames, SCHEMA_MARK};
use crate::wire::scripts::SCRIPTS;

/// How often a process renews its schema's lease, and so learns of another schema joining. A
/// process whose generation moved (its lease lapsed, or Valkey came back empty) finds out at its
/// next renewal and settles two renewals later; meanwhile it hears no other process's write.
pub const RENEW_EVERY: Duration = Duration::from_millis(500);

/// How long a lease lives unrenewed: a process silent this long is no longer counted live.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// The Valkey name of a table's live schemas: `[<namespace>:]schemas:<table>`. No value, lock or
/// marks key takes that name: theirs all hold a `{…}` hash tag after the table's name.
pub(crate) fn schemas_key_under(namespace: &str, table: &str) -> Vec<u8> {
    format!("{namespace}schemas:{table}").into_bytes()
}

/// A table's schema, and what this process last learned of the others.
pub(crate) struct Schemas {
    schema: u32,
    key: Vec<u8>,
    token: String,
    live: RwLock<Arc<Live>>,
    /// When `live` was last renewed, and the store's connection losses then ([`Heard`]).
    heard: Mutex<Option<Heard>>,
    /// One renewal at a time for writers whose view is out of date.
    renewing: tokio::sync::Mutex<()>,
    /// How many such renewals were tried: a writer that waited behind one goes on with what it
    /// found, failed or not, so that a slow Valkey costs the writers one renewal, not one each.
    renewals_tried: AtomicU64,
}

/// When this process last heard the live schemas: a write trusts what it heard only while it is
/// younger than two renewals and no connection was lost since, for Valkey may have come back
/// empty and another schema started a generation this process has not heard of (its writes would
/// not drop that generation's copies, which then outlive them for a whole life).
#[derive(Debug, Clone, Copy)]
struct Heard {
    at: Instant,
    losses: u64,
}

/// The key suffixes of this process's schema and of every other live one.
#[derive(Debug, PartialEq)]
struct Live {
    /// The generation of this schema, as Valkey last answered (none before it has).
    generation: Option<String>,
    /// The suffix of the keys this process reads and writes: its generation's once settled,
    /// before that (and while another schema may not know the generation) one of its own.
    own: Vec<u8>,
    /// Every other live schema's suffix; schema 0's (empty) always, unless it is this one.
    others: Vec<Vec<u8>>,
    /// Every live member as last answered and when its lease ends (unix ms, Valkey's clock),
    /// this process's own among them: what a renewal puts back if Valkey lost the set.
    members: Vec<(String, u64)>,
}

impl Live {
    /// This process keeps copies of its own (`private`) until it settles on the generation
    /// (`own` so far). Its writes meanwhile drop the generation's copy too: otherwise, once
    /// settled, it would read there a copy older than what it wrote while private (another
    /// process's fill of the generation, made before that write), and go back past its own write.
    fn private(mut self, private: Vec<u8>) -> Live {
        let generation = std::mem::replace(&mut self.own, private);
        self.others.push(generation);
        self.others.sort();
        self.others.dedup();
        self
    }

    /// Settled on `own`: its keys are the generation's, which its writes no longer drop.
    fn settled(&self, own: Vec<u8>) -> Live {
        Live {
            generation: self.generation.clone(),
            others: self.others.iter().filter(|s| **s != own).cloned().collect(),
            own,
            members: self.members.clone(),
        }
    }
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// How long ago the generation started (by Valkey's clock): every other live process has
    /// heard of it once two renewals have passed since.
    pub(crate) age: Duration,
    /// Processes of other schemas are live.
    pub(crate) others_live: bool,
    /// This process's generation is not the one its keys carry (it first joined, or its lease
    /// lapsed and its schema starts anew): what it wrote and read under the suffix before, no
    /// other schema's writes reach, so its L1 is not to be trusted; it keeps a suffix of its own
    /// until it [settles](Schemas::settle) on the generation.
    pub(crate) moved: bool,
}

impl Schemas {
    /// `schema` of the table `table` under `namespace`, not yet joined: until it is, a schema
    /// other than 0 writes under a generation of this process alone, which no other reads.
    pub(crate) fn new(namespace: &str, table: &str, schema: u32) -> Self {
        let token = crate::valkey::lock::new_token();
        let provisional = Live {
            generation: None,
            own: if schema == 0 {
                vec![]
            } else {
                suffix(schema, &token)
            },
            others: if schema == 0 { vec![] } else { vec![vec![]] },
            members: Vec::new(),
        };
        Schemas {
            schema,
            key: schemas_key_under(namespace, table),
            token,
            live: RwLock::new(Arc::new(provisional)),
            heard: Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
            renewals_tried: AtomicU64::new(0),
        }
    }

    fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// `true` if a key with this suffix is one of this schema's copies.
    pub(crate) fn is_own(&self, suffix: &[u8]) -> bool {
        self.live().own == suffix
    }

    /// `names` (schema 0's) as this schema's; with `writing`, the other live schemas' beside.
    pub(crate) fn names(&self, names: KeyNames, writing: bool) -> KeyNames {
        if self.schema == 0 && !writing {
            return names;
        }
        let live = self.live();
        let others = live.others.iter().map(Vec::as_slice);
        names.in_schema(&live.own, others.filter(|_| writing))
    }

    /// The other live schemas' value and lock keys of the id named `names` (schema 0's): what a
    /// fill's fenced write compares its version with. None while no other schema is live.
    pub(crate) fn others_of(&self, names: KeyNames) -> Vec<Vec<u8>> {
        let live = self.live();
        if live.others.is_empty() {
            return Vec::new();
        }
        let others = live.others.iter().map(Vec::as_slice);
        names.in_schema(&live.own, others).others
    }

    /// Before a write: renews first if what this process heard of the live schemas is out of
    /// date ([`Heard`]). A renewal that fails leaves the write to go with what was heard (Valkey
    /// is then likely to refuse the write too). A renewal that finds the keys moved leaves the
    /// move to the lease's task, which flushes L1 and settles.
    pub(crate) async fn hear_before_writing(&self, l2: &L2) {
        if self.heard_lately(l2) {
            return;
        }
        let tried = self.renewals_tried.load(Acquire);
        let _one = self.renewing.lock().await;
        if self.renewals_tried.load(Acquire) != tried || self.heard_lately(l2) {
            return;
        }
        if let Err(e) = self.renew(l2).await {
            tracing::debug!(error = %e, "renewing the schema's lease before a write failed");
        }
        self.renewals_tried.fetch_add(1, Release);
    }

    fn heard_lately(&self, l2: &L2) -> bool {
        let heard = *self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard.is_some_and(|heard| {
            heard.losses == l2.connection_losses() && heard.at.elapsed() < 2 * RENEW_EVERY
        })
    }

    /// Renews this process's lease (or joins), and learns the other live schemas. Should Valkey
    /// have lost them (it came back empty) before this process's lease ended, the renewal puts
    /// back the schemas it last heard that have no member left: their generations stay, so no
    /// process's keys move and no write of one that has not renewed yet misses the copies
    /// another reads.
    pub(crate) async fn renew(&self, l2: &L2) -> Result<Renewed> {
        let asked = Heard {
            at: Instant::now(),
            losses: l2.connection_losses(),
        };
        let restore = self.restorable();
        let mut invocation = SCRIPTS.schemas.prepare_invoke();
        invocation
            .key(self.key.as_slice())
            .arg(self.schema)
            .arg(&self.token)
            .arg(LEASE.as_millis() as u64);
        for (member, ends) in &restore {
            invocation.arg(member).arg(ends);
        }
        let invocation = &invocation;
        let answer: Vec<String> = l2
            .run("schemas (renew the lease)", None, |mut c| async move {
                invocation.invoke_async(&mut c).await
            })
            .await?;
        let [generation, how, age, ends, members @ ..] = &answer[..] else {
            return Err(crate::Error::Codec(
                "the schemas script answered nothing".into(),
            ));
        };
        if how == "3" {
            tracing::warn!(
                key = %String::from_utf8_lossy(&self.key),
                members = restore.len(),
                "Valkey had lost the table's live schemas (it came back empty): put back what this process last heard"
            );
        }
        let learned = self.learned(generation, members, ends);
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let moved = self.schema != 0 && live.own != learned.own;
        *live = Arc::new(if moved {
            learned.private(self.private())
        } else {
            learned
        });
        *self.heard.lock().unwrap_or_else(|e| e.into_inner()) = Some(asked);
        Ok(Renewed {
            age: Duration::from_millis(age.parse().unwrap_or(0)),
            others_live: !members.is_empty(),
            moved,
        })
    }

    /// Joins the table's live schemas as the table starts ([`Self::settle`]). Valkey not
    /// answering is logged: the renewals join later, and until then this process keeps copies
    /// of its own.
    pub(crate) async fn join(&self, l2: &L2, table: &str) {
        match self.renew(l2).await {
            Ok(renewed) => self.settle(&renewed, table).await,
            Err(e) => {
                tracing::warn!(table, error = %e, "joining the table's live schemas failed: retried every renewal")
            }
        }
    }

    /// After a renewal that `moved`, takes the generation's suffix for this process's keys. A
    /// generation younger than two renewals while other schemas are live (this process started
    /// it, or joined another that just did) is first left to age that long, so that their writes
    /// drop its copies before this process makes any (meanwhile it reads and writes copies of
    /// its own, which no other reads); schema 0's copies every write drops.
    pub(crate) async fn settle(&self, renewed: &Renewed, table: &str) {
        if !renewed.moved {
            return;
        }
        let heard = (2 * RENEW_EVERY).saturating_sub(renewed.age);
        if renewed.others_live && !heard.is_zero() {
            tracing::info!(
                table,
                schema = self.schema,
                "a new generation of the schema: waiting for the other schemas to hear of it"
            );
            tokio::time::sleep(heard).await;
        }
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        if let Some(generation) = &live.generation {
            let settled = live.settled(suffix(self.schema, generation));
            *live = Arc::new(settled);
        }
    }

    /// What a renewal passes, to be put back should Valkey have lost the live schemas: every
    /// member this process last heard, while its own lease may still run (the script decides on
    /// the server's clock, when it runs: a renewal held up on the way is judged by then).
    fn restorable(&self) -> Vec<(String, u64)> {
        let heard = *self.heard.lock().unwrap_or_else(|e| e.into_inner());
        match heard {
            Some(heard) if heard.at.elapsed() < LEASE => self.live().members.clone(),
            _ => Vec::new(),
        }
    }

    /// The suffix of copies only this process reads (`#<schema>.<token>`).
    fn private(&self) -> Vec<u8> {
        suffix(self.schema, &self.token)
    }

    /// What the script's answer says: this schema's `generation`, the other `members`, each
    /// followed by when its lease ends, and when this process's own `ends`.
    fn learned(&self, generation: &str, members: &[String], ends: &str) -> Live {
        let heard: Vec<(String, u64)> = members
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), millis(&pair[1])))
            .collect();
        let mut others: Vec<Vec<u8>> = heard
            .iter()
            .filter_map(|(member, _)| {
                let mut parts = member.splitn(3, ':');
                let schema: u32 = parts.next()?.parse().ok()?;
                Some(suffix(schema, parts.next()?))
            })
            .collect();
        if self.schema != 0 {
            others.push(Vec::new());
        }
        others.sort();
        others.dedup();
        let mine = format!("{}:{generation}:{}", self.schema, self.token);
        Live {
            generation: Some(generation.to_owned()),
            own: suffix(self.schema, generation),
            others,
            members: heard.into_iter().chain([(mine, millis(ends))]).collect(),
        }
    }

    /// Gives this process's lease back (the table is dropped): its schema leaves at once when
    /// it was the last process of it.
    pub(crate) async fn leave(&self, l2: &L2) {
        let member = self
            .live()
            .generation
            .as_ref()
            .map(|generation| format!("{}:{generation}:{}", self.schema, self.token));
        let Some(member) = member else { return };
        let key = self.key.as_slice();
        let _ = l2
            .run("schemas (leave)", None, |mut c| async move {
                redis::cmd("ZREM")
                    .arg(key)
                    .arg(&member)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
    }
}

/// The Valkey name of the live schemas of `table` under `namespace` (as given to
/// `StoreBuilder::namespace`, if any): a sorted set of `<schema>:<generation>:<token>`, one lease
/// per process, scored by when it ends (unix ms, Valkey's clock).
///
/// ```
/// let key = echostore::protocol::schemas_key(Some("app"), "users").unwrap();
/// assert_eq!(key, b"app:schemas:users");
/// ```
///
/// # Errors
///
/// [`crate::Error::InvalidName`] for a namespace or table name the library refuses.
pub fn schemas_key(namespace: Option<&str>, table: &str) -> Result<Vec<u8>> {
    crate::wire::key::validate_table_name(table)?;
    Ok(schemas_key_under(
        &crate::wire::key::namespace_prefix(namespace)?,
        table,
    ))
}

/// The names of `id`'s value and lock in `schema` of `generation`, as a member of the table's
/// live schemas ([`schemas_key`]) gives them: what a tool reads or deletes to reach every schema's
/// copy of an id. Schema 0's are [`crate::protocol::key_names`]', whatever the generation.
///
/// ```
/// let names = echostore::protocol::schema_key_names(None, "users", b"42", 2, "1764748651123456")
///     .unwrap();
/// assert_eq!(names.value, b"users:{42}#2.1764748651123456");
/// assert_eq!(names.lock, b"lock:users:{42}#2.1764748651123456");
/// ```
///
/// # Errors
///
/// [`crate::Error::InvalidName`] for a namespace or table name the library refuses, or a
/// generation that is not decimal digits; [`crate::Error::IdTooLong`] for an id over
/// [`crate::MAX_ID_BYTES`].
pub fn schema_key_names(
    namespace: Option<&str>,
    table: &str,
    id: &[u8],
    schema: u32,
    generation: &str,
) -> Result<KeyNames> {
    if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_digit()) {
        return Err(crate::Error::InvalidName(generation.to_owned()));
    }
    let names = crate::wire::key::key_names(namespace, table, id)?;
    Ok(names.in_schema(&suffix(schema, generation), std::iter::empty()))
}

/// A time the script answered (unix ms; a sorted set's score may read as a float); 0, long
/// past, if unreadable.
fn millis(answered: &str) -> u64 {
    answered.parse::<f64>().unwrap_or(0.0) as u64
}

/// The suffix of `schema`'s keys in `generation`: none for schema 0.
fn suffix(schema: u32, generation: &str) -> Vec<u8> {
    if schema == 0 {
        return Vec::new();
    }
    let mut suffix = vec![SCHEMA_MARK];
    suffix.extend_from_slice(format!("{schema}.{generation}").as_bytes());
    suffix
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another schema's copies are dropped by writes (schema 0's always), never its own; a
    /// schema 0 table's names are a table's without schemas.
    #[test]
    fn a_write_names_every_other_live_schema() {
        let schemas = Schemas::new("", "t", 2);
        let members = [
            "1:55:abc",
            "1700000010000",
            "0:7:def",
            "1700000009500",
            "1:55:x",
            "1.7e12",
        ]
        .map(str::to_owned);
        let live = schemas.learned("99", &members, "1700000010400");
        assert_eq!(live.own, b"#2.99");
        assert_eq!(live.others, vec![b"".to_vec(), b"#1.55".to_vec()]);
        let heard = [
            ("1:55:abc".to_owned(), 1_700_000_010_000),
            ("0:7:def".to_owned(), 1_700_000_009_500),
            ("1:55:x".to_owned(), 1_700_000_000_000),
            (format!("2:99:{}", schemas.token), 1_700_000_010_400),
        ];
        assert_eq!(
            live.members, heard,
            "what a renewal puts back if Valkey lost it"
        );

        let zero = Schemas::new("", "t", 0);
        let plain = KeyNames::new("", "t", &7u64).unwrap();
        assert_eq!(zero.names(plain.clone(), false), plain);
        assert_eq!(
            zero.learned("5", &members[..2], "0").others,
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
        let learned = schemas.learned(
            "99",
            &["1:55:abc".to_owned(), "1700000010000".to_owned()],
            "0",
        );
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
}
