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
//! reached, are never read again. A process uses a generation only once every other process that
//! writes has heard of it ([`Schemas::settle`]): every live member of another schema has renewed
//! since it began (its renewal answered it), none this process saw live before has gone missing
//! from the set (a Valkey restart empties it, and a writer that has not renewed since still
//! writes as if the generation did not exist), and it is two renewals old. A table that starts
//! waits for that before it serves, a little while; a process whose keys move (its lease lapsed,
//! or Valkey lost the set) keeps copies only it reads meanwhile, its writes dropping the
//! generation's copy it will move onto.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::valkey::l2::L2;
use crate::wire::key::{KeyNames, SCHEMA_MARK};
use crate::wire::scripts::SCRIPTS;

/// How often a process renews its schema's lease, and so learns of another schema joining.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(500);

/// How long a lease lives unrenewed: a process silent this long is no longer counted live.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// Renewals a starting table makes at most while it waits to settle on its generation; past them
/// it serves with copies of its own, and the renewals settle it later.
const JOIN_RENEWALS: u32 = 6;

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
    /// The other schemas' processes (their tokens) this process has seen live, and when it last
    /// did: one missing from a renewal's answer may still write without knowing a new generation.
    seen: Mutex<HashMap<String, Instant>>,
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
        }
    }
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// How long ago the generation started (by Valkey's clock).
    pub(crate) age: Duration,
    /// Processes of other schemas are live.
    pub(crate) others_live: bool,
    /// Every process of another schema that may write has heard of the generation: each live one
    /// renewed since it began, and none seen live within a lease is missing.
    pub(crate) heard: bool,
    /// This process's generation changed (it first joined, or its schema starts anew: its lease
    /// lapsed with no other process of its schema left, or Valkey lost the set): what it wrote and
    /// read under the suffix before, no other schema's writes reach, so its L1 is not to be
    /// trusted; it keeps a suffix of its own until it [settles](Schemas::settle) on the
    /// generation.
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
        };
        Schemas {
            schema,
            key: schemas_key_under(namespace, table),
            token,
            live: RwLock::new(Arc::new(provisional)),
            seen: Mutex::new(HashMap::new()),
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

    /// Renews this process's lease (or joins), and learns the other live schemas.
    pub(crate) async fn renew(&self, l2: &L2) -> Result<Renewed> {
        let mut invocation = SCRIPTS.schemas.prepare_invoke();
        invocation
            .key(self.key.as_slice())
            .arg(self.schema)
            .arg(&self.token)
            .arg(LEASE.as_millis() as u64);
        let invocation = &invocation;
        let answer: Vec<String> = l2
            .run("schemas (renew the lease)", None, |mut c| async move {
                invocation.invoke_async(&mut c).await
            })
            .await?;
        let [generation, _how, age, heard, members @ ..] = &answer[..] else {
            return Err(crate::Error::Codec(
                "the schemas script answered nothing".into(),
            ));
        };
        let learned = self.learned(generation, members);
        let none_missing = self.none_missing(members);
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let moved = self.schema != 0 && live.generation != learned.generation;
        // Until it settles, a process keeps copies of its own, whatever the renewals since.
        let private = self.schema != 0 && live.own != learned.own;
        *live = Arc::new(if private {
            learned.private(self.private())
        } else {
            learned
        });
        Ok(Renewed {
            age: Duration::from_millis(age.parse().unwrap_or(0)),
            others_live: !members.is_empty(),
            heard: heard == "1" && none_missing,
            moved,
        })
    }

    /// Notes the other schemas' processes a renewal answered (`members`); `true` unless one seen
    /// live within a lease is missing from them (Valkey lost the set, or its lease lapsed: it
    /// may not have renewed since, and still write as it knew the schemas then).
    fn none_missing(&self, members: &[String]) -> bool {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|_, at| now.duration_since(*at) < LEASE);
        let missing = seen.len();
        let mut found = 0;
        for token in members.iter().filter_map(|m| m.splitn(3, ':').nth(2)) {
            found += usize::from(seen.insert(token.to_owned(), now).is_some());
        }
        found == missing
    }

    /// Joins the table's live schemas as the table starts, and waits (a few renewals at most)
    /// until it may settle on its generation ([`Self::settle`]). Valkey not answering is logged:
    /// the renewals join later; until this process settles, it keeps copies of its own.
    pub(crate) async fn join(&self, l2: &L2, table: &str) {
        for renewal in 0..JOIN_RENEWALS {
            match self.renew(l2).await {
                Ok(renewed) if self.settle(&renewed) || !self.is_private() => return,
                Ok(_) if renewal == 0 => tracing::info!(
                    table,
                    schema = self.schema,
                    "a new generation of the schema: waiting for the other schemas to hear of it"
                ),
                Ok(_) => {}
                Err(e) => {
                    return tracing::warn!(table, error = %e, "joining the table's live schemas failed: retried every renewal");
                }
            }
            tokio::time::sleep(RENEW_EVERY).await;
        }
    }

    /// Settles this process's keys on its generation if they are not on it yet and `renewed`
    /// says it may: every process of another schema that may write has heard of the generation,
    /// and it is two renewals old while others are live (a write one of them sent before it
    /// heard may still land). `true` if it settled now.
    pub(crate) fn settle(&self, renewed: &Renewed) -> bool {
        let young = renewed.others_live && renewed.age < 2 * RENEW_EVERY;
        if !renewed.heard || young {
            return false;
        }
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let Some(generation) = &live.generation else {
            return false;
        };
        let own = suffix(self.schema, generation);
        if live.own == own {
            return false;
        }
        *live = Arc::new(live.settled(own));
        true
    }

    /// Whether this process keeps copies of its own (it has not settled on its generation);
    /// never for schema 0, whose copies are a table's without schemas.
    fn is_private(&self) -> bool {
        self.schema != 0 && self.live().own == self.private()
    }

    /// The suffix of copies only this process reads (`#<schema>.<token>`).
    fn private(&self) -> Vec<u8> {
        suffix(self.schema, &self.token)
    }

    /// What the script's answer says: this schema's `generation`, and the other `members`.
    fn learned(&self, generation: &str, members: &[String]) -> Live {
        let mut others: Vec<Vec<u8>> = members
            .iter()
            .filter_map(|member| {
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
        Live {
            generation: Some(generation.to_owned()),
            own: suffix(self.schema, generation),
            others,
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
mod tests;
