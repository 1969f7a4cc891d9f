//! Inline SVG charts for the HTML reports, drawn with plotters' SVG backend. The backend
//! writes text as SVG `<text>` elements (escaped, sized by a built-in estimate), so no font
//! files are needed and the HTML stays self-contained.
//!
//! Every chart plots only [`plottable`] values: finite and within ±[`PLOT_LIMIT`]. A value
//! beyond that (a corrupt telemetry cell of `1e308`, say) is left out like a NaN, so an axis
//! never spans a range its key points cannot be computed over.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{ReportError, Result};

/// Chart size in pixels.
const SIZE: (u32, u32) = (760, 340);

/// Palette for successive series: the colour-blind friendly Okabe–Ito colours, then five
/// more distinct ones for charts with many sensors.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(240, 228, 66),
];

/// One named line of a line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// `(x, y)` points; points that are not [`plottable`] are skipped.
    pub points: Vec<(f64, f64)>,
}

/// The largest magnitude a chart plots. Far beyond any latency, temperature, power or count a
/// report shows, and small enough that a span of two such values and its padding stay finite
/// and resolvable in f64.
pub const PLOT_LIMIT: f64 = 1e15;

/// Whether `v` can be plotted: finite and within ±[`PLOT_LIMIT`].
pub fn plottable(v: f64) -> bool {
    v.is_finite() && v.abs() <= PLOT_LIMIT
}

fn plot_err(plot: &str, e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot {
        plot: plot.into(),
        problem: e.to_string(),
    }
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * lo.abs().max(1.0) {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.05 };
        return (lo - pad, hi + pad);
    }
    let pad = (hi - lo) * 0.04;
    (lo - pad, hi + pad)
}

fn frame<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    x: (f64, f64),
    y: (f64, f64),
) -> Result<
    ChartContext<
        'a,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
> {
    root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x.0..x.1, y.0..y.1)
        .map_err(|e| plot_err(title, e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| plot_err(title, e))?;
    Ok(chart)
}

/// A line chart of one or more series. Returns `None` when no series has a finite point.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<Option<String>> {
    let finite: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| plottable(x) && plottable(y))
                .collect()
        })
        .collect();
    let all = finite.iter().flatten();
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return Ok(None);
    }
    let named = series.len() > 1 || series.iter().any(|s| !s.name.is_empty());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        // Named series get a legend column to the right of the plot, so a chart with many
        // sensors never hides its lines behind the legend.
        let (plot_area, legend_area) = if named {
            let (p, l) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
            (p, Some(l))
        } else {
            (root.clone(), None)
        };
        let mut chart = frame(
            &plot_area,
            title,
            x_label,
            y_label,
            padded(x0, x1),
            padded(y0, y1),
        )?;
        for (i, pts) in finite.into_iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| plot_err(title, e))?;
        }
        if let Some(legend) = legend_area {
            draw_legend(&legend, title, series, 0)?;
        }
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

/// One point of an [`interval_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalPoint {
    /// Position on the x axis.
    pub x: f64,
    /// The value.
    pub value: f64,
    /// Its interval `(lo, hi)`, drawn as an error bar, when known.
    pub interval: Option<(f64, f64)>,
    /// Marked with a red cross (a failing verdict).
    pub failed: bool,
}

/// A line through the values, a dot at each, a vertical error bar over each interval and a red
/// cross on each failed point. Points whose x or value is not [`plottable`] are left out, and
/// intervals with a bound that is not; `None` when no point remains.
pub fn interval_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[IntervalPoint],
) -> Result<Option<String>> {
    let pts: Vec<&IntervalPoint> = points
        .iter()
        .filter(|p| plottable(p.x) && plottable(p.value))
        .collect();
    if pts.is_empty() {
        return Ok(None);
    }
    let bar = |p: &IntervalPoint| match p.interval {
        Some((lo, hi)) if plottable(lo) && plottable(hi) => Some((lo, hi)),
        _ => None,
    };
    let xs = pts.iter().map(|p| p.x);
    let (x0, x1) = (
        xs.clone().fold(f64::INFINITY, f64::min),
        xs.fold(f64::NEG_INFINITY, f64::max),
    );
    let ys = pts.iter().flat_map(|p| {
        let (lo, hi) = bar(p).unwrap_or((p.value, p.value));
        [p.value, lo, hi]
    });
    let (y0, y1) = (
        ys.clone().fold(f64::INFINITY, f64::min),
        ys.fold(f64::NEG_INFINITY, f64::max),
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(
            &root,
            title,
            x_label,
            y_label,
            padded(x0, x1),
            padded(y0, y1),
        )?;
        let colour = PALETTE[0];
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.x, p.value)),
                colour.stroke_width(2),
            ))
            .map_err(|e| plot_err(title, e))?;
        chart
            .draw_series(pts.iter().filter_map(|p| {
                let (lo, hi) = bar(p)?;
                Some(ErrorBar::new_vertical(
                    p.x,
                    lo,
                    p.value,
                    hi,
                    BLACK.stroke_width(1),
                    10,
                ))
            }))
            .map_err(|e| plot_err(title, e))?;
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.x, p.value), 3, colour.filled())),
            )
            .map_err(|e| plot_err(title, e))?;
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| p.failed)
                    .map(|p| Cross::new((p.x, p.value), 6, RED.stroke_width(2))),
            )
            .map_err(|e| plot_err(title, e))?;
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

/// Width of the legend column of line charts with named series, pixels.
const LEGEND_WIDTH: u32 = 210;
/// Legend rows that fit beside a chart.
const LEGEND_ROWS: usize = 21;

/// Draws the legend of `series`, whose colours start at `PALETTE[first_colour]`.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    series: &[Series],
    first_colour: usize,
) -> Result<()> {
    let row = |i: usize| 36 + 14 * i as i32;
    let style = ("sans-serif", 11).into_font().color(&BLACK);
    let shown = if series.len() > LEGEND_ROWS {
        LEGEND_ROWS - 1
    } else {
        series.len()
    };
    for (i, s) in series.iter().take(shown).enumerate() {
        let color = PALETTE[(first_colour + i) % PALETTE.len()];
        let y = row(i);
        area.draw(&PathElement::new(
            vec![(4, y), (22, y)],
            color.stroke_width(3),
        ))
        .map_err(|e| plot_err(title, e))?;
        let mut name: String = s.name.chars().take(30).collect();
        if s.name.chars().count() > 30 {
            name.push('…');
        }
        area.draw(&Text::new(name, (28, y - 6), style.clone()))
            .map_err(|e| plot_err(title, e))?;
    }
    if shown < series.len() {
        area.draw(&Text::new(
            format!("… and {} more", series.len() - shown),
            (28, row(shown) - 6),
            style,
        ))
        .map_err(|e| plot_err(title, e))?;
    }
    Ok(())
}

/// Equal-width bins over the [`plottable`] values: `(left edge, right edge, count)`.
pub fn bin(values: &[f64], bins: usize) -> Vec<(f64, f64, u64)> {
    let v: Vec<f64> = values.iter().copied().filter(|&x| plottable(x)).collect();
    if v.is_empty() || bins == 0 {
        return Vec::new();
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, hi + 0.5)
    };
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0u64; bins];
    for x in v {
        let i = (((x - lo) / width).floor() as usize).min(bins - 1);
        counts[i] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (lo + i as f64 * width, lo + (i + 1) as f64 * width, c))
        .collect()
}

/// A histogram of `values` in `bins` equal-width bins. `None` when there is no finite value.
pub fn histogram(
    title: &str,
    x_label: &str,
    values: &[f64],
    bins: usize,
) -> Result<Option<String>> {
    let b = bin(values, bins);
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return Ok(None);
    };
    let max_count = b.iter().map(|x| x.2).max().unwrap_or(1).max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(first.0..last.1, 0.0..max_count * 1.08)
            .map_err(|e| plot_err(title, e))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("count")
            .y_label_formatter(&|v: &f64| format!("{v:.0}"))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| plot_err(title, e))?;
        let fill = PALETTE[0].mix(0.7).filled();
        chart
            .draw_series(
                b.iter()
                    .map(|&(l, r, c)| Rectangle::new([(l, 0.0), (r, c as f64)], fill)),
            )
            .map_err(|e| plot_err(title, e))?;
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

/// Empirical CDF points of the [`plottable`] values: `(value, fraction ≤ value)`.
pub fn ecdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|&x| plottable(x)).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// Vertices of the empirical CDF of the [`plottable`] values drawn as a step function: from
/// `(x₁, 0)` each distinct value `x` adds a vertical rise `(x, F(x⁻)) → (x, F(x))`, and the
/// level holds until the next value, so consecutive vertices always share their x (a rise) or
/// their y (a tread) — never a sloped line between samples.
pub fn ecdf_steps(values: &[f64]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut level = 0.0;
    for (x, f) in ecdf(values) {
        match out.last_mut() {
            // A tie: the rise at this x just goes higher.
            Some(last) if last.0 == x => last.1 = f,
            _ => {
                out.push((x, level));
                out.push((x, f));
            }
        }
        level = f;
    }
    out
}

/// A vertical marker on a chart: a line at `x` with a label beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Label, e.g. `p50 364.0 ms`.
    pub label: String,
    /// Position on the x axis.
    pub x: f64,
}

/// Colours of successive markers: distinct from the curve's (`PALETTE[0]`).
const MARKER_COLOURS: [RGBColor; 3] = [PALETTE[2], PALETTE[4], PALETTE[1]];

/// The empirical CDF of `values` as a step function ([`ecdf_steps`]) with vertical markers
/// (percentiles, say) from 0 to 1, each labelled. `None` when no value is [`plottable`].
pub fn step_cdf_chart(
    title: &str,
    x_label: &str,
    values: &[f64],
    markers: &[Marker],
) -> Result<Option<String>> {
    let steps = ecdf_steps(values);
    let markers: Vec<&Marker> = markers.iter().filter(|m| plottable(m.x)).collect();
    let xs = steps.iter().map(|p| p.0).chain(markers.iter().map(|m| m.x));
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if steps.is_empty() {
        return Ok(None);
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(
            &root,
            title,
            x_label,
            "fraction ≤ x",
            padded(x0, x1),
            (0.0, 1.08),
        )?;
        chart
            .draw_series(LineSeries::new(steps, PALETTE[0].stroke_width(2)))
            .map_err(|e| plot_err(title, e))?;
        for (i, m) in markers.iter().enumerate() {
            let color = MARKER_COLOURS[i % MARKER_COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    vec![(m.x, 0.0), (m.x, 1.0)],
                    color.stroke_width(1),
                ))
                .map_err(|e| plot_err(title, e))?;
            // Labels stack downwards from the top so close percentiles do not overprint, and
            // sit left of a marker in the right half so they stay inside the chart.
            let right_half = m.x > (x0 + x1) / 2.0;
            let (anchor, label) = if right_half {
                (HPos::Right, format!("{} ", m.label))
            } else {
                (HPos::Left, format!(" {}", m.label))
            };
            let style = ("sans-serif", 12)
                .into_font()
                .color(&color)
                .pos(Pos::new(anchor, VPos::Center));
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (m.x, 1.04 - 0.07 * i as f64),
                    style,
                )))
                .map_err(|e| plot_err(title, e))?;
        }
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

/// One panel of a [`timeline_chart`]: its own y axis, its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Y axis label, e.g. `°C`.
    pub y_label: String,
    /// Named series of the panel.
    pub series: Vec<Series>,
}

/// Height of one panel of a timeline chart, pixels.
const PANEL_HEIGHT: u32 = 200;

/// Stacked panels sharing one x axis (the same range in every panel, its label under the
/// last), each with its own y axis and a legend column. Colours run on across panels, so no
/// two series of the chart share one (up to the palette's twelve). Panels with no
/// [`plottable`] point are left out; `None` when none remains.
pub fn timeline_chart(title: &str, x_label: &str, panels: &[Panel]) -> Result<Option<String>> {
    let keep = |p: &(f64, f64)| plottable(p.0) && plottable(p.1);
    let panels: Vec<&Panel> = panels
        .iter()
        .filter(|p| p.series.iter().flat_map(|s| &s.points).any(keep))
        .collect();
    if panels.is_empty() {
        return Ok(None);
    }
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    for p in panels
        .iter()
        .flat_map(|p| &p.series)
        .flat_map(|s| &s.points)
    {
        if keep(p) {
            x0 = x0.min(p.0);
            x1 = x1.max(p.0);
        }
    }
    let x = padded(x0, x1);
    let height = 40 + PANEL_HEIGHT * panels.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let body = root
            .titled(title, ("sans-serif", 18))
            .map_err(|e| plot_err(title, e))?;
        let areas = body.split_evenly((panels.len(), 1));
        let mut colour = 0;
        for (i, (panel, area)) in panels.iter().zip(&areas).enumerate() {
            let last = i + 1 == panels.len();
            let (plot_area, legend) = area.split_horizontally(SIZE.0 - LEGEND_WIDTH);
            let pts = || {
                panel
                    .series
                    .iter()
                    .flat_map(|s| &s.points)
                    .filter(|p| keep(p))
            };
            let y0 = pts().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let y1 = pts().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let mut chart = ChartBuilder::on(&plot_area)
                .margin(8)
                .x_label_area_size(if last { 40 } else { 20 })
                .y_label_area_size(64)
                .build_cartesian_2d(x.0..x.1, {
                    let (lo, hi) = padded(y0, y1);
                    lo..hi
                })
                .map_err(|e| plot_err(title, e))?;
            let mut mesh = chart.configure_mesh();
            mesh.y_desc(panel.y_label.as_str())
                .light_line_style(RGBColor(235, 235, 235));
            if last {
                mesh.x_desc(x_label);
            }
            mesh.draw().map_err(|e| plot_err(title, e))?;
            for (j, s) in panel.series.iter().enumerate() {
                let color = PALETTE[(colour + j) % PALETTE.len()];
                let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(keep).collect();
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                    .map_err(|e| plot_err(title, e))?;
            }
            draw_legend(&legend, title, &panel.series, colour)?;
            colour += panel.series.len();
        }
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

/// One bar of a bar chart, with an optional interval drawn as an error bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Category label under the bar.
    pub label: String,
    /// Bar height.
    pub value: f64,
    /// Interval `(lo, hi)` around the value, when known.
    pub interval: Option<(f64, f64)>,
}

/// A vertical bar chart with error bars, one bar per category, the y axis starting at zero.
/// Bars whose value is not [`plottable`] are left out; `None` when no bar remains.
pub fn bar_chart(title: &str, y_label: &str, bars: &[Bar]) -> Result<Option<String>> {
    let bars: Vec<&Bar> = bars.iter().filter(|b| plottable(b.value)).collect();
    if bars.is_empty() {
        return Ok(None);
    }
    let finite_interval = |b: &Bar| match b.interval {
        Some((lo, hi)) if plottable(lo) && plottable(hi) => Some((lo, hi)),
        _ => None,
    };
    let top = bars
        .iter()
        .map(|b| finite_interval(b).map_or(b.value, |(_, hi)| hi.max(b.value)))
        .fold(0.0f64, f64::max);
    let bottom = bars
        .iter()
        .map(|b| finite_interval(b).map_or(b.value, |(lo, _)| lo.min(b.value)))
        .fold(0.0f64, f64::min);
    let (y0, y1) = if top > bottom {
        (bottom * 1.08, top * 1.08)
    } else {
        (0.0, 1.0)
    };
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            // An integer range a..b has b - a + 1 values; one bar per value. (A lone bar
            // gets a second, empty slot: plotters maps a one-value range off-centre.)
            .build_cartesian_2d((0..bars.len().max(2) - 1).into_segmented(), y0..y1)
            .map_err(|e| plot_err(title, e))?;
        let label_of = |x: &SegmentValue<usize>| -> String {
            match x {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&label_of)
            .y_desc(y_label)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| plot_err(title, e))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let color = PALETTE[i % PALETTE.len()];
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), b.value),
                    ],
                    color.mix(0.75).filled(),
                );
                r.set_margin(0, 0, 18, 18);
                r
            }))
            .map_err(|e| plot_err(title, e))?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                let (lo, hi) = finite_interval(b)?;
                Some(ErrorBar::new_vertical(
                    SegmentValue::CenterOf(i),
                    lo,
                    b.value,
                    hi,
                    BLACK.stroke_width(2),
                    12,
                ))
            }))
            .map_err(|e| plot_err(title, e))?;
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: f64, interval: Option<(f64, f64)>, failed: bool) -> IntervalPoint {
        IntervalPoint {
            x,
            value: 10.0 + x,
            interval,
            failed,
        }
    }

    /// `<line>` elements drawn in `colour` (the strokes of error bars and crosses).
    fn stroked(svg: &str, colour: &str) -> usize {
        let stroke = format!("stroke=\"{colour}\"");
        svg.lines()
            .filter(|l| l.starts_with("<line") && l.contains(&stroke))
            .count()
    }

    #[test]
    fn interval_chart_draws_an_error_bar_per_interval_and_a_cross_per_failure() {
        let bare: Vec<IntervalPoint> = (1..=4).map(|x| point(f64::from(x), None, false)).collect();
        let mut marked = bare.clone();
        // Intervals inside the values' range (11 to 14), so both charts share their axes.
        marked[0].interval = Some((11.0, 12.0));
        marked[2].interval = Some((12.5, 14.0));
        // A bound beyond the plot limit: no bar.
        marked[3].interval = Some((13.0, f64::INFINITY));
        marked[1].failed = true;
        let a = interval_chart("t", "x", "y", &bare).unwrap().unwrap();
        let b = interval_chart("t", "x", "y", &marked).unwrap().unwrap();
        // An error bar is three black lines (the bar and its two caps); a cross two red ones.
        assert_eq!(
            stroked(&b, "#000000") - stroked(&a, "#000000"),
            2 * 3,
            "{b}"
        );
        assert_eq!(stroked(&b, "#FF0000"), 2, "{b}");
        assert_eq!(stroked(&a, "#FF0000"), 0);
        assert_eq!(
            interval_chart("t", "x", "y", &[point(f64::NAN, None, false)]).unwrap(),
            None
        );
    }
}
