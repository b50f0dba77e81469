//! One flight's protocol, on its own task: the lock contended for, the source read under its
//! lease, the fenced write, the loser's wait; a batch's flights run as one; and a `put`'s or
//! `invalidate`'s write on its way to Valkey.

pub(crate) mod batch_fill;
pub(crate) mod fill;
pub(crate) mod l2_write;
pub(crate) mod load;
pub(crate) mod losers;
