//! [`Touchy`]: an id whose `Eq` panics, the tests' way to crash a table's owner (a user `Key`
//! bug), and the table over it.

use std::hash::{Hash, Hasher};

use echostore::{Key, Store, Table};

use super::Source;

/// An id whose equality panics when two *different* callers' copies of the poisoned id meet: the
/// owner compares ids in its flights map, so a second caller's miss on the poisoned id crashes the
/// owner. (The second field tells the callers' copies apart.)
#[derive(Debug, Clone)]
pub struct Touchy(pub u64, pub u8);

/// The poisoned id.
pub const POISON: u64 = 666;

impl PartialEq for Touchy {
    fn eq(&self, other: &Self) -> bool {
        assert!(
            !(self.0 == POISON && other.0 == POISON && self.1 != other.1),
            "Touchy::eq on the poisoned id"
        );
        self.0 == other.0
    }
}
impl Eq for Touchy {}
impl Hash for Touchy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}
impl Key for Touchy {
    fn render(&self) -> std::borrow::Cow<'_, [u8]> {
        self.0.to_string().into_bytes().into()
    }
}

/// The `touchy` table on `store`, reading `source` (by the id's number).
pub async fn touchy(store: &Store, source: &Source) -> Table<Touchy, String> {
    let loader = source.loader();
    store
        .table::<Touchy, String>("touchy")
        .loader(move |id: Touchy| loader(id.0))
        .build()
        .await
        .expect("table")
}
