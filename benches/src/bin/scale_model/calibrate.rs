//! The bench's CSV read back, and the model's per-operation costs fitted to it: server CPU per
//! write as a base plus a cost per push (per mode) and per refill read, lag p99 as a base plus a
//! cost per recipient (per mode), each by least squares on relative error so that the small
//! cells weigh as much as the large.

use crate::fleet::{Costs, Mode};

/// An invalidation push's bytes besides its keys: `>2`, `$10 invalidate`, the array's header.
const MESSAGE_BYTES: f64 = 25.0;

/// The most tracking connections a cell may have to calibrate the model.
pub(crate) const FIT_CONNS: usize = 64;

/// The most tracking connections a cell may have to calibrate the lag.
const LAG_FIT_CONNS: usize = 16;

/// One row of `docs/scale/measured.csv`.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub(crate) mode: Mode,
    pub(crate) conns: usize,
    /// 1: the connections were one process's; more: a process each.
    pub(crate) procs: usize,
    pub(crate) rate: f64,
    pub(crate) keys: u32,
    pub(crate) held: u32,
    pub(crate) seconds: f64,
    pub(crate) writes: f64,
    pub(crate) achieved_rate: f64,
    pub(crate) pushes: f64,
    pub(crate) push_keys: f64,
    pub(crate) push_bytes: f64,
    pub(crate) refills: f64,
    pub(crate) cpu_us: f64,
    pub(crate) lag_p99_us: f64,
}

impl Measured {
    pub(crate) fn cpu_per_write(&self) -> f64 {
        self.cpu_us / self.writes.max(1.0)
    }

    pub(crate) fn push_bytes_per_write(&self) -> f64 {
        self.push_bytes / self.writes.max(1.0)
    }

    pub(crate) fn recipients_per_write(&self) -> f64 {
        self.push_keys / self.writes.max(1.0)
    }

    /// Whether the writer kept its rate: a saturated cell's lag is a backlog's, not the mode's.
    pub(crate) fn kept_rate(&self) -> bool {
        self.achieved_rate >= 0.95 * self.rate
    }
}

/// Reads the bench's CSV.
pub(crate) fn read(path: &str) -> Result<Vec<Measured>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e} (run `just scale-bench` first)"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("{path}: no column {name}"))
    };
    let idx = [
        "mode",
        "conns",
        "rate",
        "keys",
        "held",
        "seconds",
        "writes",
        "achieved_rate",
        "pushes",
        "push_keys",
        "push_bytes",
        "refills",
        "cpu_us",
        "lag_p99_us",
    ]
    .map(col);
    let mut idx_ok = [0; 14];
    for (slot, i) in idx_ok.iter_mut().zip(idx) {
        *slot = i?;
    }
    // Older files have no `procs`: their connections were all one process's.
    let procs = header.iter().position(|h| *h == "procs");
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64, String> {
            f.get(idx_ok[i])
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{path}: bad row {line}"))
        };
        let mode = match f.get(idx_ok[0]) {
            Some(&"bcast") => Mode::Bcast,
            Some(&"default") => Mode::Default,
            _ => return Err(format!("{path}: bad mode in {line}")),
        };
        rows.push(Measured {
            mode,
            conns: num(1)? as usize,
            procs: procs
                .and_then(|i| f.get(i))
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            rate: num(2)?,
            keys: num(3)? as u32,
            held: num(4)? as u32,
            seconds: num(5)?,
            writes: num(6)?,
            achieved_rate: num(7)?,
            pushes: num(8)?,
            push_keys: num(9)?,
            push_bytes: num(10)?,
            refills: num(11)?,
            cpu_us: num(12)?,
            lag_p99_us: num(13)?,
        });
    }
    Ok(rows)
}

/// Fits the model's costs to `rows` (the calibration set).
pub(crate) fn fit(rows: &[Measured]) -> Result<Costs, String> {
    // CPU per write = write + idle / rate + push[mode] × keys pushed per write (+ for BCAST a
    // cost per push message, which carries every key of one event-loop turn) + read × refills
    // per write: the idle term is what the server spends per second whatever it serves (its event
    // loop waking, its cron), spread over the writes of that second.
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    // With one rate the idle term cannot be told from the write's own cost: it is left out.
    let one_rate = rows.iter().all(|r| r.rate == rows[0].rate);
    // Above FIT_CONNS this process, sharing the machine, receives and refills behind the server,
    // and a cell's refills and pushes no longer follow from its settings.
    for r in rows
        .iter()
        .filter(|r| r.writes > 0.0 && r.conns <= FIT_CONNS)
    {
        let pushes = r.recipients_per_write();
        let (b, msg, d) = match r.mode {
            Mode::Bcast => (pushes, r.pushes / r.writes, 0.0),
            Mode::Default => (0.0, 0.0, pushes),
        };
        let idle = if one_rate { 0.0 } else { 1.0 / r.rate };
        xs.push(vec![1.0, idle, b, msg, d, r.refills / r.writes]);
        ys.push(r.cpu_per_write());
    }
    let cpu = least_squares(&xs, &ys).ok_or("the CPU fit is singular (too few cells?)")?;
    let mut costs = Costs {
        write_us: cpu[0].max(0.1),
        idle_us_per_s: cpu[1].max(0.0),
        push_us: [cpu[2].max(0.0), cpu[4].max(0.01)],
        message_us: cpu[3].max(0.0),
        read_us: cpu[5].max(0.1),
        message_bytes: MESSAGE_BYTES,
        key_bytes: 0.0,
        lag0_us: [0.0; 2],
        lag_per_recipient_us: [0.0; 2],
    };
    let bytes: f64 = rows.iter().map(|r| r.push_bytes).sum();
    let messages: f64 = rows.iter().map(|r| r.pushes).sum();
    let keys: f64 = rows.iter().map(|r| r.push_keys).sum();
    costs.key_bytes = (bytes - messages * MESSAGE_BYTES) / keys.max(1.0);
    for (m, mode) in Mode::ALL.into_iter().enumerate() {
        let kept: Vec<&Measured> = rows
            .iter()
            .filter(|r| r.mode == mode && r.kept_rate() && r.lag_p99_us > 0.0)
            // The lag shows the receiving side's backlog sooner than the CPU does.
            .filter(|r| r.conns <= LAG_FIT_CONNS)
            .collect();
        let xs: Vec<Vec<f64>> = kept
            .iter()
            .map(|r| vec![1.0, r.recipients_per_write()])
            .collect();
        let ys: Vec<f64> = kept.iter().map(|r| r.lag_p99_us).collect();
        let lag = least_squares(&xs, &ys)
            .unwrap_or_else(|| vec![ys.first().copied().unwrap_or(0.0), 0.0]);
        costs.lag0_us[m] = lag[0].max(1.0);
        // The fit is of the p99, which is the 99th recipient in a hundred.
        costs.lag_per_recipient_us[m] = (lag[1] / 0.99).max(0.0);
    }
    Ok(costs)
}

/// Weighted least squares on relative error (weights 1/y²) by the normal equations; columns
/// that are all zero get a zero coefficient.
fn least_squares(xs: &[Vec<f64>], ys: &[f64]) -> Option<Vec<f64>> {
    let n = xs.first()?.len();
    let used: Vec<usize> = (0..n).filter(|&j| xs.iter().any(|x| x[j] != 0.0)).collect();
    let k = used.len();
    if xs.len() < k {
        return None;
    }
    let mut a = vec![vec![0.0; k + 1]; k];
    for (x, &y) in xs.iter().zip(ys) {
        let w = 1.0 / (y * y).max(1e-12);
        for (i, &ci) in used.iter().enumerate() {
            for (j, &cj) in used.iter().enumerate() {
                a[i][j] += w * x[ci] * x[cj];
            }
            a[i][k] += w * x[ci] * y;
        }
    }
    // Gauss-Jordan with partial pivoting.
    for col in 0..k {
        let pivot = (col..k).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let factor = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= factor * p;
                }
            }
        }
    }
    let mut out = vec![0.0; n];
    for (i, &c) in used.iter().enumerate() {
        out[c] = a[i][k] / a[i][i];
    }
    Some(out)
}
