//! The SVG line charts of docs/scale.md: log-log axes, one line with points per series. SVG
//! with plotters' built-in font, so drawing needs no system font or library.

use plotters::prelude::*;

/// One line of a chart: its legend and its points.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// Dashed-looking (hollow points) for predictions, solid for measurements.
    pub(crate) predicted: bool,
}

/// A chart to draw.
pub(crate) struct Chart<'a> {
    pub(crate) path: &'a str,
    pub(crate) title: &'a str,
    pub(crate) x: &'a str,
    pub(crate) y: &'a str,
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

/// Draws `series` on log-log axes spanning their points.
pub(crate) fn draw(chart: &Chart<'_>, series: &[Series]) -> Result<(), String> {
    let all = series.iter().flat_map(|s| s.points.iter().copied());
    let positive: Vec<(f64, f64)> = all.filter(|&(x, y)| x > 0.0 && y > 0.0).collect();
    if positive.is_empty() {
        return Err(format!("{}: nothing to draw", chart.path));
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in &positive {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let (x0, x1, y0, y1) = (x0 / 1.3, x1 * 1.3, y0 / 1.5, y1 * 1.5);
    let root = SVGBackend::new(chart.path, (800, 500)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", chart.path);
    root.fill(&WHITE).map_err(e)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(e)?;
    ctx.configure_mesh()
        .x_desc(chart.x)
        .y_desc(chart.y)
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()
        .map_err(e)?;
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x > 0.0 && y > 0.0)
            .collect();
        let style = if s.predicted {
            color.stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        ctx.draw_series(LineSeries::new(points.clone(), style))
            .map_err(e)?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        let predicted = s.predicted;
        ctx.draw_series(points.into_iter().map(move |p| {
            if predicted {
                Circle::new(p, 4, color.stroke_width(1))
            } else {
                Circle::new(p, 3, color.filled())
            }
        }))
        .map_err(e)?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// A tick label: `1.5k`, `2M`, `0.25`.
fn short(v: f64) -> String {
    let trim = |x: f64| {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}
