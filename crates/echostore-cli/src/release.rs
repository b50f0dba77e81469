//! The token-checked release (the seed's §3 readout), run for real, the way the library runs it:
//! `DELIFEQ lock token` where the server has it (Valkey 9.0), else the library's
//! [`RELEASE_SCRIPT`] — `GET` the lock, compare it with this request's token, `DEL` only on a
//! match, atomically in Lua; `--lua` runs the script anyway. Against the seed's own key
//! `lock:set:{EMS0ODMggk1d5N}`.
//!
//! Two lock states: `owned`, where this request set the lock (`NX PX 5000`) and still holds it, so
//! the `DEL` fires; and `reacquired`, where this request's lock expired (its `PX` ran out, which
//! the readout waits for by polling) and another request took the lock with its own token, so the
//! comparison differs and nothing is deleted — the bug a plain `DEL` would have. The readout shows
//! the lock's value, this token, the comparison, whether the `DEL` fired and the lock after, then
//! cleans the key up.

use std::time::Duration;

use clap::{Args, ValueEnum};
use echostore::protocol::{NativeCommands, RELEASE_SCRIPT, new_token};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::time::Instant;

use crate::output;
use crate::valkey::Target;
use crate::{CliResult, Outcome};

/// The seed's lock key (table `set`, id `EMS0ODMggk1d5N`).
const LOCK_KEY: &str = "lock:set:{EMS0ODMggk1d5N}";

/// The lock's life when this request holds it, as on the seed page.
const LOCK_PX_MS: u64 = 5000;

/// The short life of this request's lock in the `reacquired` state: it must expire first.
const SHORT_PX_MS: u64 = 100;

/// How long to wait for the short lock to expire before giving up.
const EXPIRY_WAIT: Duration = Duration::from_secs(5);

/// Flags of `echostore release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// What the lock holds when this request releases it.
    #[arg(long, value_enum, default_value_t = LockState::Owned)]
    state: LockState,

    /// Release with the Lua script even where the server has `DELIFEQ`.
    #[arg(long)]
    lua: bool,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,
}

/// The lock's state at release time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum LockState {
    /// This request set the lock and still holds it: the DEL fires.
    Owned,
    /// This request's lock expired and another request acquired it: the DEL must not fire.
    Reacquired,
}

/// The readout, as printed with `--json`.
#[derive(Debug, Serialize)]
struct ReleaseReport {
    readout: &'static str,
    state: LockState,
    valkey: String,
    key: &'static str,
    /// What released: `"DELIFEQ"` (the server's own compare-and-delete) or `"lua"` (the script).
    released_with: &'static str,
    /// The script's SHA1, as sent with EVALSHA.
    script_sha1: String,
    /// This request's token.
    token: String,
    /// PX this request's SET used.
    token_px_ms: u64,
    /// For `reacquired`: how long until this request's lock was gone, ms.
    expired_after_ms: Option<f64>,
    /// For `reacquired`: the other request's token.
    other_token: Option<String>,
    /// The lock's value just before the release.
    lock_value: Option<String>,
    /// `equal` or `differs`.
    comparison: &'static str,
    /// What the script returned: 1 (deleted) or 0 (not this request's lock).
    script_returned: i64,
    del_fired: bool,
    /// The lock's value after the release.
    lock_value_after: Option<String>,
    /// `gone` or `still the other holder's`.
    lock_after: String,
    /// For `reacquired`: whether the other request's own token-checked release then deleted it.
    other_released: Option<bool>,
    /// `true` when the release did what the token check promises for this state.
    correct: bool,
    verdict: String,
}

/// Runs the release against the chosen lock state and prints the readout.
pub(crate) async fn run(target: &Target, args: &ReleaseArgs) -> CliResult<Outcome> {
    let mut conn = target.connect().await?;
    let info = echostore_testkit::info::read(&mut conn, "server").await?;
    let native = !args.lua && NativeCommands::from_info(&info).delifeq;
    let report = release(&mut conn, target, args.state, native).await;
    // Clean up whatever happened: the lock key is scratch for this readout.
    let cleanup: redis::RedisResult<i64> = conn.del(LOCK_KEY).await;
    let report = report?;
    cleanup.map_err(|e| format!("cleaning up {LOCK_KEY}: {e}"))?;
    if args.json {
        output::print_json(&report)?;
    } else {
        print_human(&report, target);
    }
    Ok(if report.correct {
        Outcome::Held
    } else {
        Outcome::Failed
    })
}

async fn release(
    conn: &mut MultiplexedConnection,
    target: &Target,
    state: LockState,
    native: bool,
) -> CliResult<ReleaseReport> {
    // A lock left over from an interrupted run would make our SET NX fail.
    let _: i64 = conn.del(LOCK_KEY).await?;
    let token = new_token();
    let (token_px_ms, expired_after_ms, other_token) = match state {
        LockState::Owned => {
            acquire(conn, &token, LOCK_PX_MS).await?;
            (LOCK_PX_MS, None, None)
        }
        LockState::Reacquired => {
            acquire(conn, &token, SHORT_PX_MS).await?;
            let expired_after = wait_until_gone(conn).await?;
            let other = new_token();
            acquire(conn, &other, LOCK_PX_MS).await?;
            (
                SHORT_PX_MS,
                Some(output::round3(expired_after.as_secs_f64() * 1000.0)),
                Some(other),
            )
        }
    };

    let lock_value: Option<String> = conn.get(LOCK_KEY).await?;
    let comparison = if lock_value.as_deref() == Some(token.as_str()) {
        "equal"
    } else {
        "differs"
    };
    let script = redis::Script::new(RELEASE_SCRIPT);
    let script_returned = compare_and_delete(conn, &script, &token, native).await?;
    let del_fired = script_returned == 1;
    let lock_value_after: Option<String> = conn.get(LOCK_KEY).await?;
    let lock_after = match (&lock_value_after, &other_token) {
        (None, _) => "gone".to_owned(),
        (Some(v), Some(other)) if v == other => "still the other holder's".to_owned(),
        (Some(v), _) if *v == token => "still this request's".to_owned(),
        (Some(_), _) => "held by an unknown token".to_owned(),
    };
    // The other request finishes its rebuild and releases its own lock, token-checked too.
    let other_released = match &other_token {
        Some(other) => Some(compare_and_delete(conn, &script, other, native).await? == 1),
        None => None,
    };
    let correct = match state {
        LockState::Owned => del_fired && lock_value_after.is_none(),
        LockState::Reacquired => !del_fired && lock_value_after == other_token,
    };
    let verdict = match (state, correct) {
        (LockState::Owned, true) => {
            "the lock was this request's own: the token matched and the DEL fired.".to_owned()
        }
        (LockState::Reacquired, true) => "the lock had expired and another request holds it now: \
             the token differs, the DEL did not fire, and the other holder keeps its lock \
             (a plain DEL would have deleted it)."
            .to_owned(),
        (_, false) => format!(
            "UNEXPECTED: in state {state:?} the script returned {script_returned} and the lock is {lock_after}"
        ),
    };
    Ok(ReleaseReport {
        readout: "release",
        state,
        valkey: target.shown_url(),
        key: LOCK_KEY,
        released_with: if native { "DELIFEQ" } else { "lua" },
        script_sha1: script.get_hash().to_owned(),
        token,
        token_px_ms,
        expired_after_ms,
        other_token,
        lock_value,
        comparison,
        script_returned,
        del_fired,
        lock_value_after,
        lock_after,
        other_released,
        correct,
        verdict,
    })
}

/// `SET lock token NX PX px`; anything but OK is an error (someone else holds the seed's key).
/// The token-checked release of [`LOCK_KEY`]: `DELIFEQ` when `native`, else the script. 1 when
/// the lock was `token`'s and is deleted, 0 otherwise.
async fn compare_and_delete(
    conn: &mut MultiplexedConnection,
    script: &redis::Script,
    token: &str,
    native: bool,
) -> CliResult<i64> {
    let returned = match native {
        true => {
            redis::cmd("DELIFEQ")
                .arg(LOCK_KEY)
                .arg(token)
                .query_async(conn)
                .await
        }
        false => script.key(LOCK_KEY).arg(token).invoke_async(conn).await,
    };
    returned.map_err(|e| format!("releasing {LOCK_KEY}: {e}").into())
}

async fn acquire(conn: &mut MultiplexedConnection, token: &str, px: u64) -> CliResult<()> {
    let reply: Option<String> = redis::cmd("SET")
        .arg(LOCK_KEY)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(px)
        .query_async(conn)
        .await?;
    match reply.as_deref() {
        Some("OK") => Ok(()),
        _ => Err(
            format!("SET {LOCK_KEY} NX PX {px} did not answer OK: another client holds it").into(),
        ),
    }
}

/// Polls until the lock key is gone (its PX ran out); returns how long that took.
async fn wait_until_gone(conn: &mut MultiplexedConnection) -> CliResult<Duration> {
    let started = Instant::now();
    loop {
        let exists: bool = conn.exists(LOCK_KEY).await?;
        if !exists {
            return Ok(started.elapsed());
        }
        if started.elapsed() > EXPIRY_WAIT {
            return Err(format!("{LOCK_KEY} did not expire within {EXPIRY_WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn print_human(r: &ReleaseReport, target: &Target) {
    println!(
        "token-checked release · {} · state: {}",
        r.key,
        match r.state {
            LockState::Owned => "owned",
            LockState::Reacquired => "reacquired",
        }
    );
    println!("  {}", target.describe());
    println!();
    println!(
        "  this request        SET {} {} NX PX {}  → OK",
        r.key, r.token, r.token_px_ms
    );
    if let (Some(after), Some(other)) = (r.expired_after_ms, &r.other_token) {
        println!(
            "  its lock expired    gone after {} ms (PX {} ran out; polled)",
            output::ms(after),
            r.token_px_ms
        );
        println!(
            "  another request     SET {} {other} NX PX {LOCK_PX_MS}  → OK",
            r.key
        );
    }
    println!();
    println!(
        "  the lock holds      {}",
        r.lock_value.as_deref().unwrap_or("(nothing)")
    );
    println!("  this token          {}", r.token);
    println!("  comparison          {}", r.comparison);
    let how = match r.released_with {
        "DELIFEQ" => format!("DELIFEQ {} <token>", r.key),
        _ => format!("EVALSHA {}…", &r.script_sha1[..r.script_sha1.len().min(12)]),
    };
    println!(
        "  DEL fired           {} ({how} returned {})",
        if r.del_fired { "yes" } else { "no" },
        r.script_returned
    );
    let after = match &r.lock_value_after {
        None => r.lock_after.clone(),
        Some(v) => format!("{} ({v})", r.lock_after),
    };
    println!("  the lock after      {after}");
    if let Some(released) = r.other_released {
        println!(
            "  then                the other request released its own lock (returned {})",
            u8::from(released)
        );
    }
    println!();
    println!("{}", r.verdict);
}
