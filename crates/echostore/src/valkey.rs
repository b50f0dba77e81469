//! Valkey as L2: the data connection's reads and writes behind the breaker, the regeneration
//! lock's commands, and the envelope (header, codec, nesting limit) of the bytes stored.

pub(crate) mod codec;
pub(crate) mod depth;
pub(crate) mod envelope;
pub(crate) mod header;
pub(crate) mod l2;
pub(crate) mod lock;
