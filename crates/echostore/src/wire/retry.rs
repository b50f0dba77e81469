//! Trying a Valkey command again in the background until it lands: for what a blip (the
//! connection reset, the breaker open) must not leave to a key's own expiry, as a lock's release
//! or a source-budget lease's return.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::wire::under_way::{UnderWay, tracked};

/// Runs `attempt` again, in the background, after a pause that doubles from `first` up to
/// `longest` each time it fails, until it succeeds or `lasting` from now would have passed (what
/// it undoes has ended by then anyway), counted in `under_way` meanwhile. For a command that has
/// just failed; without a runtime, nothing runs.
pub(crate) fn in_background<F>(
    (lasting, under_way): (Duration, &Arc<UnderWay>),
    (first, longest): (Duration, Duration),
    mut attempt: impl FnMut() -> F + Send + 'static,
) where
    F: Future<Output = bool> + Send,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(tracked(Some(under_way), async move {
        let until = Instant::now() + lasting;
        let mut pause = first;
        while Instant::now() + pause < until {
            tokio::time::sleep(pause).await;
            if attempt().await {
                return;
            }
            pause = (pause * 2).min(longest);
        }
    }));
}
