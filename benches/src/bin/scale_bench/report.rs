//! What the bench writes: a table row per cell on stdout, a CSV row per cell
//! (`docs/scale/measured.csv`), and the SVG plots of docs/scale.md, drawn from the cells of one
//! process's connections on log-log axes (plotters' built-in font: no system font or library).

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::Mode;
use crate::cell::{Cell, Row};

pub(crate) fn print_header() {
    println!(
        "{:<8} {:>5} {:>6} {:>7} {:>8} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "mode",
        "conns",
        "rate",
        "keys",
        "achieved",
        "cpu µs/w",
        "push B/w",
        "net B/w",
        "lag p50",
        "lag p99"
    );
}

pub(crate) fn print_row(cell: Cell, r: &Row) {
    let conns = if cell.procs > 1 {
        format!("{}p", cell.procs)
    } else {
        cell.conns.to_string()
    };
    println!(
        "{:<8} {:>5} {:>6} {:>7} {:>8.0} {:>9.1} {:>10.1} {:>10.1} {:>7}µs {:>7}µs",
        cell.mode.name(),
        conns,
        cell.rate,
        cell.keys,
        r.achieved_rate,
        r.per_write(r.cpu_us),
        r.per_write(r.push_bytes as f64),
        r.per_write(r.net_out_bytes as f64),
        r.lag_p50_us,
        r.lag_p99_us
    );
}

pub(crate) const CSV_HEADER: &str = "mode,conns,procs,rate,keys,held,seconds,writes,achieved_rate,pushes,push_keys,push_bytes,refills,cpu_us,net_out_bytes,set_calls,set_usec,get_calls,get_usec,lag_p50_us,lag_p99_us,lag_max_us,unmatched";

pub(crate) fn csv_row(csv: &mut String, cell: Cell, seconds: f64, r: &Row) {
    let _ = writeln!(
        csv,
        "{},{},{},{},{},{},{},{},{:.1},{},{},{},{},{:.0},{},{},{},{},{},{},{},{},{}",
        cell.mode.name(),
        cell.conns,
        cell.procs,
        cell.rate,
        cell.keys,
        cell.held,
        seconds,
        r.writes,
        r.achieved_rate,
        r.pushes,
        r.push_keys,
        r.push_bytes,
        r.refills,
        r.cpu_us,
        r.net_out_bytes,
        r.set_calls,
        r.set_usec,
        r.get_calls,
        r.get_usec,
        r.lag_p50_us,
        r.lag_p99_us,
        r.lag_max_us,
        r.unmatched
    );
}

/// A chart: its file, title, y axis, and the figure it plots for each cell.
type Chart = (&'static str, &'static str, &'static str, fn(&Row) -> f64);

/// A line of a chart: its legend and its points.
type Series = (String, Vec<(f64, f64)>);

/// Draws `measured_cpu.svg`, `measured_push_bytes.svg` and `measured_lag.svg` into `dir`: one
/// line per mode, rate and key set, against the number of connections.
pub(crate) fn plot(cells: &[(Cell, Row)], dir: &std::path::Path) -> Result<(), String> {
    let mut groups: Vec<(u32, u32, Mode)> = cells
        .iter()
        .map(|(c, _)| (c.keys, c.rate, c.mode))
        .collect();
    groups.sort_by_key(|&(keys, rate, mode)| (keys, rate, mode.name()));
    groups.dedup();
    let charts: [Chart; 3] = [
        (
            "measured_cpu.svg",
            "Valkey CPU per write (measured)",
            "server CPU µs per write",
            |r| r.per_write(r.cpu_us),
        ),
        (
            "measured_push_bytes.svg",
            "push bytes per write (measured)",
            "bytes pushed per write",
            |r| r.per_write(r.push_bytes as f64).max(0.1),
        ),
        (
            "measured_lag.svg",
            "coherence lag p99, write reply → push (measured)",
            "lag p99 µs",
            |r| r.lag_p99_us as f64,
        ),
    ];
    for (file, title, y, value) in charts {
        let series: Vec<Series> = groups
            .iter()
            .map(|&(keys, rate, mode)| {
                let label = format!("{} {rate}/s {keys} keys", mode.name());
                let of_group = |c: &Cell| (c.keys, c.rate, c.mode) == (keys, rate, mode);
                let points = cells
                    .iter()
                    .filter(|(c, _)| of_group(c) && c.procs <= 1)
                    .map(|(c, r)| (c.conns as f64, value(r)))
                    .filter(|&(x, y)| x > 0.0 && y > 0.0)
                    .collect();
                (label, points)
            })
            .collect();
        draw(&dir.join(file), title, y, &series)?;
    }
    Ok(())
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// One chart: each series a line with its points, on log-log axes spanning them.
fn draw(path: &std::path::Path, title: &str, y: &str, series: &[Series]) -> Result<(), String> {
    let all = series.iter().flat_map(|(_, points)| points.iter().copied());
    let (x0, x1, y0, y1) = all.fold((f64::MAX, f64::MIN, f64::MAX, f64::MIN), |b, (x, y)| {
        (b.0.min(x), b.1.max(x), b.2.min(y), b.3.max(y))
    });
    if x0 > x1 {
        return Err(format!("{}: nothing to draw", path.display()));
    }
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 / 1.3..x1 * 1.3).log_scale(),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )
        .map_err(e)?;
    ctx.configure_mesh()
        .x_desc("tracking connections")
        .y_desc(y)
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()
        .map_err(e)?;
    for (i, (label, points)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        ctx.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        let dots = points.iter().map(|&p| Circle::new(p, 3, color.filled()));
        ctx.draw_series(dots).map_err(e)?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// A tick label: `1.5k`, `2M`, `0.25`.
fn short(v: f64) -> String {
    let trim = |x: f64| {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    match v.abs() {
        a if a >= 1e6 => format!("{}M", trim(v / 1e6)),
        a if a >= 1e3 => format!("{}k", trim(v / 1e3)),
        _ => trim(v),
    }
}
