//! The wire: where the Valkey is and the connections to it, the breaker, key names, the Lua
//! scripts and which native commands the server has, Valkey's clock, trying a command again
//! until it lands, counting what is under way on it, and a round trip's timeout.

pub(crate) mod breaker;
pub(crate) mod connect;
pub(crate) mod healing;
pub(crate) mod key;
pub(crate) mod natives;
pub(crate) mod retry;
pub(crate) mod scripts;
pub(crate) mod server_clock;
pub(crate) mod timeout;
pub(crate) mod under_way;
