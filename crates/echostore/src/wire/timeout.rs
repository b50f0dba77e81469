//! A round trip's timeout that a pause of this process does not trip.
//!
//! A timer that fires late (the process was stopped, `SIGSTOP` or a VM descheduled, or its
//! runtime starved) timed the pause, not Valkey: the reply may be in the socket already, unread
//! behind the task that reads it, which the wake-up has not reached yet. Taken as Valkey's
//! silence, it would open the breaker, replace a healthy connection, load in-process what Valkey
//! holds (a value that, under key tracking, no push would drop), or drop the tracking connection
//! with the pushes buffered in it, which a process that wakes must read instead (docs/coherence.md,
//! "While the tracking task does not run"). So a wait whose timer fired more than half its span
//! late waits again, from then: it times out only after a span in which this process ran.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, error::Elapsed, timeout_at};

/// `round_trip`'s output, or `Elapsed` once `limit` has passed with this process running (see
/// the module's header).
pub(crate) async fn within<F: Future>(
    limit: Duration,
    round_trip: F,
) -> Result<F::Output, Elapsed> {
    let mut round_trip = std::pin::pin!(round_trip);
    loop {
        let deadline = Instant::now() + limit;
        match timeout_at(deadline, round_trip.as_mut()).await {
            Ok(output) => return Ok(output),
            Err(elapsed) if deadline.elapsed() <= limit / 2 => return Err(elapsed),
            Err(_) => {} // fired late: the span did not run
        }
    }
}

/// [`within`] for a redis-rs call: its own error, or a timeout as redis-rs reports one.
pub(crate) async fn call_within<T, F>(limit: Duration, call: F) -> redis::RedisResult<T>
where
    F: Future<Output = redis::RedisResult<T>>,
{
    within(limit, call).await.unwrap_or_else(|_| {
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time").into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process paused past a round trip's limit wakes with the reply in its socket, and the
    /// task that reads it woken after the waiter's timer: the waiter sees its timer fired and
    /// no reply yet. It waits again, and takes the reply. (The pause is a blocking sleep of
    /// the runtime's one thread; the reading task wakes on a timer later than the waiter's, as
    /// the reply's bytes are read only once the wake-up reaches it.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_timer_that_fired_late_waits_again() {
        let (reply, replied) = tokio::sync::oneshot::channel::<&str>();
        let limit = Duration::from_millis(10);
        let waiter = tokio::spawn(within(limit, replied));
        tokio::spawn(async move {
            tokio::time::sleep(limit * 10).await;
            let _ = reply.send("PONG");
        });
        tokio::task::yield_now().await; // both arm their timers
        std::thread::sleep(limit * 30); // the process is paused
        let answer = waiter.await.expect("the waiter ran");
        assert_eq!(answer.ok().and_then(Result::ok), Some("PONG"));
    }

    /// A round trip never answered times out.
    #[tokio::test(flavor = "current_thread")]
    async fn silence_times_out() {
        let (_reply, replied) = tokio::sync::oneshot::channel::<()>();
        assert!(within(Duration::from_millis(20), replied).await.is_err());
    }
}
