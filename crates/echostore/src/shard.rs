//! The shard layer: one owner actor per shard of a table's ids, the flights map that orders
//! everything about one id (misses, writes, pushes), the supervisor that restarts a crashed
//! owner, and the recognition of this process's own writes among coherence pushes.

pub(crate) mod flights;
pub(crate) mod own_writes;
pub(crate) mod owner;
pub(crate) mod supervisor;
