//! `--plot FILE.svg`: three charts of a [`LabReport`] in one SVG document (plotters, SVG
//! backend, text as SVG `<text>` elements):
//!
//! 1. "keys per server": one bar per scheme for every server;
//! 2. "keys moved per event": one bar per event for every scheme, in % of the keys;
//! 3. "ring sd/avg against V": the ring's sd/avg at every `--vnodes` value (log scale),
//!    with Maglev's sd/avg as a dashed reference line when Maglev ran.
//!
//! The document is built in memory ([`svg`]); the caller writes it.

use std::sync::OnceLock;

use plotters::{coord::Shift, prelude::*, style::register_font};

use super::report::LabReport;

/// Width and height of the document, in pixels.
pub const SIZE: (u32, u32) = (1000, 1350);

/// The chart titles, in document order.
pub const TITLES: [&str; 3] = [
    "keys per server",
    "keys moved per event (% of keys)",
    "ring sd/avg against virtual nodes per server V",
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The font text is measured (SVG) and drawn (PNG) with: DejaVu Sans Mono (Bitstream
/// Vera licence, fonts/LICENSE-DejaVu.txt), embedded so that no system font is needed.
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSansMono.ttf");

/// Registers [`FONT`] as plotters' `sans-serif`, once.
///
/// # Errors
/// The embedded font does not parse (never for the committed file).
pub fn register_fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            register_font("sans-serif", style, FONT)
                .map_err(|_| "the embedded font does not parse".to_owned())?;
        }
        Ok(())
    })
    .clone()
}

/// The SVG document of `report`.
///
/// # Errors
/// A drawing error of plotters, as text.
pub fn svg(report: &LabReport) -> Result<String, String> {
    register_fonts()?;
    let mut document = String::new();
    {
        let root = SVGBackend::with_string(&mut document, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let areas = root.split_evenly((3, 1));
        load_chart(&areas[0], report).map_err(|e| e.to_string())?;
        moved_chart(&areas[1], report).map_err(|e| e.to_string())?;
        vnodes_chart(&areas[2], report).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(document)
}

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Grouped bars: `groups` labels on x, `series[j].1[i]` the bar of series `j` in group `i`.
fn grouped_bars(
    area: &Area<'_>,
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> DrawResult {
    let n = groups.len().max(1) as f64;
    // Head room for the legend (about 15 px per series in a plot about 360 px high) in
    // the upper right, so that it never covers a bar.
    let legend = ((15 * series.len() + 25) as f64 / 360.0).min(0.6);
    let top = series
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        / (1.0 - legend);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .margin_right(32)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n, 0.0..top)?;
    // Half-unit labels: a group's name at its centre, nothing at the edges.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * groups.len() + 1)
        .x_label_formatter(&|x| {
            let centre = x - 0.5;
            let index = centre.round();
            if (centre - index).abs() < 1e-6 && index >= 0.0 {
                groups.get(float_index(index)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (j, (name, values)) in series.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        let offset = 0.1 + j as f64 * width;
        chart
            .draw_series(values.iter().enumerate().map(|(i, &value)| {
                let x = i as f64 + offset;
                Rectangle::new([(x, 0.0), (x + width * 0.9, value)], color.filled())
            }))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    draw_legend(&mut chart)
}

/// The legend box in the upper right of a chart.
fn draw_legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
}

/// A non-negative whole float as an index.
fn float_index(x: f64) -> usize {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "x is a small non-negative whole number (a group index)"
    )]
    let index = x as usize;
    index
}

fn load_chart(area: &Area<'_>, report: &LabReport) -> DrawResult {
    let groups: Vec<String> = report.servers.iter().map(|s| s.name.clone()).collect();
    let series: Vec<(String, Vec<f64>)> = report
        .schemes
        .iter()
        .map(|s| {
            let loads = s.per_server.iter().map(|l| l.keys as f64).collect();
            (s.scheme.clone(), loads)
        })
        .collect();
    grouped_bars(area, TITLES[0], "keys", &groups, &series)
}

fn moved_chart(area: &Area<'_>, report: &LabReport) -> DrawResult {
    let groups: Vec<String> = report.schemes.iter().map(|s| s.scheme.clone()).collect();
    let series: Vec<(String, Vec<f64>)> = report
        .events
        .iter()
        .map(|e| {
            let moved = e.schemes.iter().map(|m| m.moved_fraction * 100.0).collect();
            (e.event.clone(), moved)
        })
        .collect();
    grouped_bars(area, TITLES[1], "% of keys moved", &groups, &series)
}

fn vnodes_chart(area: &Area<'_>, report: &LabReport) -> DrawResult {
    let points: Vec<(f64, f64)> = report
        .vnodes_sweep
        .iter()
        .map(|row| (f64::from(row.vnodes), row.keys.sd_avg))
        .collect();
    let maglev = report
        .schemes
        .iter()
        .find(|s| s.scheme == "maglev")
        .map(|s| s.keys.sd_avg);
    let (lo, hi) = points
        .iter()
        .fold((f64::MAX, 1.0_f64), |(lo, hi), &(v, _)| {
            (lo.min(v), hi.max(v))
        });
    let (lo, hi) = if lo >= hi {
        (hi / 2.0, hi * 2.0)
    } else {
        (lo, hi)
    };
    let top = points
        .iter()
        .map(|p| p.1)
        .chain(maglev)
        .fold(0.0_f64, f64::max)
        .max(1e-6)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(TITLES[2], ("sans-serif", 20))
        .margin(12)
        .margin_right(32)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("V (log scale)")
        .y_desc("sd/avg of keys per server")
        .draw()?;
    let color = Palette99::pick(1).to_rgba();
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label("ring")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    if let Some(sd_avg) = maglev {
        let grey = RGBColor(96, 96, 96);
        chart
            .draw_series(DashedLineSeries::new(
                [(lo, sd_avg), (hi, sd_avg)],
                6,
                4,
                grey.into(),
            ))?
            .label("maglev")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey));
    }
    draw_legend(&mut chart)
}
