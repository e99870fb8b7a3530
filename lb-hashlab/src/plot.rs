//! `--plot FILE.svg|FILE.png`: the charts of a [`LabReport`], one under the other, as SVG
//! (plotters' SVG backend, text as `<text>` elements) or PNG (plotters' bitmap backend,
//! text drawn from the embedded font, encoded by the `png` crate):
//!
//! 1. keys per server: one bar per scheme for every server, and the ideal (each server's
//!    fair share) as a dashed black segment;
//! 2. keys moved, one chart per event (at most [`MAX_EVENT_CHARTS`]): a stacked bar per
//!    scheme, "to the new server", "from the removed server" and "between old servers",
//!    with the least any scheme must move (dashed) and mod-N's theory `1 - min/lcm`
//!    (dotted) as lines;
//! 3. the ring's sd/avg against `V` (two `V` or more), with the theory
//!    `sqrt((N - 1)/(N·V))` dashed and Maglev's sd/avg as a grey reference;
//! 4. bounded load against `epsilon` (two values or more): keys' and requests' max/avg
//!    (and, with request counts, requests' max/avg when requests are bounded) with the
//!    cap `1 + epsilon` dashed;
//! 5. the ring as a circle (when the ring or bounded load ran): every arc coloured by
//!    the server that owns it, the points as dots and, in small runs, the keys as ticks.
//!
//! A chart with nothing to show is left out, never drawn empty; [`omitted`] says which
//! and why, for the text report.

use std::{f64::consts::TAU, sync::OnceLock};

use plotters::{coord::Shift, prelude::*, style::register_font};

use super::report::{EventReport, LabReport, RingPicture};

/// Width of the document, in pixels.
pub const WIDTH: u32 = 1000;
/// Height of one chart, in pixels.
pub const CHART_HEIGHT: u32 = 450;
/// Height of the ring picture, in pixels.
pub const RING_HEIGHT: u32 = 700;
/// Events drawn as their own moved-keys chart at most.
pub const MAX_EVENT_CHARTS: usize = 4;

/// Title of the keys-per-server chart.
pub const LOAD_TITLE: &str = "keys per server (dashed: the fair share)";
/// Title of the `V` sweep chart.
pub const VNODES_TITLE: &str = "ring sd/avg against virtual nodes per server V";
/// Title of the `epsilon` sweep chart.
pub const EPSILON_TITLE: &str = "bounded load: max/avg against epsilon";
/// Legend names of the moved-keys stacks, bottom to top.
pub const MOVED_PARTS: [&str; 3] = [
    "to the new server",
    "from the removed server",
    "between old servers",
];

/// The font text is measured (SVG) and drawn (PNG) with: DejaVu Sans Mono (Bitstream
/// Vera licence, fonts/LICENSE-DejaVu.txt), embedded so that no system font is needed.
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSansMono.ttf");

/// Registers `FONT` as plotters' `sans-serif`, once.
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

/// One chart of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    /// Keys per server.
    Load,
    /// Keys moved by event `n`.
    Moved(usize),
    /// sd/avg against `V`.
    Vnodes,
    /// Bounded load against `epsilon`.
    Epsilon,
    /// The ring as a circle.
    Ring,
}

/// The charts `report` has something to show in, in document order.
#[must_use]
pub fn charts(report: &LabReport) -> Vec<Chart> {
    let mut charts = vec![Chart::Load];
    charts.extend((0..report.events.len().min(MAX_EVENT_CHARTS)).map(Chart::Moved));
    if report.vnodes_sweep.len() > 1 {
        charts.push(Chart::Vnodes);
    }
    if report.epsilon_sweep.len() > 1 {
        charts.push(Chart::Epsilon);
    }
    if report.ring_picture.is_some() {
        charts.push(Chart::Ring);
    }
    charts
}

/// Why charts are left out, one sentence each.
#[must_use]
pub fn omitted(report: &LabReport) -> Vec<String> {
    let mut why = Vec::new();
    if report.events.is_empty() {
        why.push("no --event: no keys-moved chart".to_owned());
    } else if report.events.len() > MAX_EVENT_CHARTS {
        why.push(format!(
            "only the first {MAX_EVENT_CHARTS} events have a keys-moved chart"
        ));
    }
    if report.vnodes_sweep.len() < 2 {
        why.push("one V: no sd/avg-against-V chart (give --vnodes 1,10,100,1000)".to_owned());
    }
    if report.ring_picture.is_none() {
        why.push("neither ring nor bounded ran: no ring picture".to_owned());
    }
    why
}

/// The height of the document of `charts`.
#[must_use]
pub fn height(charts: &[Chart]) -> u32 {
    charts
        .iter()
        .map(|c| {
            if *c == Chart::Ring {
                RING_HEIGHT
            } else {
                CHART_HEIGHT
            }
        })
        .sum()
}

/// The SVG document of `report`.
///
/// # Errors
/// A drawing error of plotters, as text.
pub fn svg(report: &LabReport) -> Result<String, String> {
    register_fonts()?;
    let charts = charts(report);
    let mut document = String::new();
    {
        let root =
            SVGBackend::with_string(&mut document, (WIDTH, height(&charts))).into_drawing_area();
        draw(&root, report, &charts)?;
    }
    Ok(document)
}

/// The PNG image of `report` (8-bit RGB).
///
/// # Errors
/// A drawing or encoding error, as text.
pub fn png(report: &LabReport) -> Result<Vec<u8>, String> {
    register_fonts()?;
    let charts = charts(report);
    let size = (WIDTH, height(&charts));
    let mut pixels = vec![0_u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        draw(&root, report, &charts)?;
    }
    let mut out = Vec::new();
    let mut encoder = ::png::Encoder::new(&mut out, size.0, size.1);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer
        .write_image_data(&pixels)
        .map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &LabReport,
    charts: &[Chart],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut rest = root.clone();
    for chart in charts {
        let h = if *chart == Chart::Ring {
            RING_HEIGHT
        } else {
            CHART_HEIGHT
        };
        let (area, below) = rest.split_vertically(h);
        let drawn = match chart {
            Chart::Load => load_chart(&area, report),
            Chart::Moved(n) => moved_chart(&area, &report.events[*n]),
            Chart::Vnodes => vnodes_chart(&area, report),
            Chart::Epsilon => epsilon_chart(&area, report),
            Chart::Ring => match &report.ring_picture {
                Some(picture) => ring_chart(&area, report, picture),
                None => Ok(()),
            },
        };
        drawn.map_err(|e| e.to_string())?;
        rest = below;
    }
    root.present().map_err(|e| e.to_string())
}

/// The colour of series or server `i`.
fn colour(i: usize) -> RGBAColor {
    Palette99::pick(i).to_rgba()
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

/// A chart of unit-wide x slots over a linear y axis.
type GroupChart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A cartesian chart with `groups` named at the centres of unit-wide x slots.
fn group_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    groups: &'a [String],
    top: f64,
) -> Result<GroupChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .margin_right(32)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n, 0.0..top)?;
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
    Ok(chart)
}

/// Head room over the tallest bar for a legend of `entries` lines.
fn with_legend_room(max: f64, entries: usize) -> f64 {
    let legend = ((15 * entries + 25) as f64 / 360.0).min(0.6);
    max.max(1e-9) / (1.0 - legend)
}

fn load_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &LabReport,
) -> DrawResult<DB> {
    let groups: Vec<String> = report.servers.iter().map(|s| s.name.clone()).collect();
    let max = report
        .schemes
        .iter()
        .flat_map(|s| s.per_server.iter().map(|l| l.keys as f64))
        .fold(0.0, f64::max);
    let top = with_legend_room(max, report.schemes.len() + 1);
    let mut chart = group_chart(area, LOAD_TITLE, "keys", &groups, top)?;
    let width = 0.8 / report.schemes.len().max(1) as f64;
    for (j, s) in report.schemes.iter().enumerate() {
        let c = colour(j);
        let offset = 0.1 + j as f64 * width;
        chart
            .draw_series(s.per_server.iter().enumerate().map(|(i, l)| {
                let x = i as f64 + offset;
                Rectangle::new([(x, 0.0), (x + width * 0.9, l.keys as f64)], c.filled())
            }))?
            .label(s.scheme.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
    }
    // The fair share of each server: keys * w / sum(w).
    let total_weight: f64 = report.servers.iter().map(|s| f64::from(s.weight)).sum();
    let keys = report.keys as f64;
    let mut ideal = Vec::new();
    for (i, s) in report.servers.iter().enumerate() {
        let share = keys * f64::from(s.weight) / total_weight.max(1.0);
        ideal.push(DashedLineSeries::new(
            [(i as f64 + 0.05, share), (i as f64 + 0.95, share)],
            6,
            4,
            BLACK.stroke_width(2),
        ));
    }
    for (n, series) in ideal.into_iter().enumerate() {
        let drawn = chart.draw_series(series)?;
        if n == 0 {
            drawn
                .label("ideal (fair share)")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
        }
    }
    legend(&mut chart)
}

fn moved_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    event: &EventReport,
) -> DrawResult<DB> {
    let groups: Vec<String> = event.schemes.iter().map(|m| m.scheme.clone()).collect();
    let share = |n: u64, m: &super::report::Movement| {
        if m.moved == 0 {
            0.0
        } else {
            m.moved_fraction * 100.0 * n as f64 / m.moved as f64
        }
    };
    let minimum = event.theory_minimum_moved.map(|r| r.value * 100.0);
    let mod_n = event
        .theory_mod_n_kept
        .filter(|_| event.schemes.iter().any(|m| m.scheme == "modn"))
        .map(|r| (1.0 - r.value) * 100.0);
    let max = event
        .schemes
        .iter()
        .map(|m| m.moved_fraction * 100.0)
        .chain(minimum)
        .chain(mod_n)
        .fold(0.0, f64::max);
    let top = with_legend_room(max.max(1.0), 5);
    let title = format!("keys moved by {} (% of keys)", event.event);
    let mut chart = group_chart(area, &title, "% of keys moved", &groups, top)?;
    for (part, name) in MOVED_PARTS.iter().enumerate() {
        let c = colour(part);
        chart
            .draw_series(event.schemes.iter().enumerate().map(|(i, m)| {
                let parts = [
                    share(m.to_added, m),
                    share(m.from_removed, m),
                    share(m.between_stayed, m),
                ];
                let base: f64 = parts[..part].iter().sum();
                let x = i as f64 + 0.2;
                Rectangle::new([(x, base), (x + 0.6, base + parts[part])], c.filled())
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
    }
    let n = groups.len() as f64;
    if let Some(least) = minimum {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, least), (n, least)],
                8,
                5,
                BLACK.stroke_width(2),
            ))?
            .label(format!("ideal: the least any scheme moves, {least:.1}%"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    }
    if let Some(theory) = mod_n {
        let grey = RGBColor(96, 96, 96);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, theory), (n, theory)],
                2,
                4,
                grey.stroke_width(2),
            ))?
            .label(format!("theory: mod-N moves {theory:.1}%"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey.stroke_width(2)));
    }
    legend(&mut chart)
}

fn vnodes_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &LabReport,
) -> DrawResult<DB> {
    let points: Vec<(f64, f64)> = report
        .vnodes_sweep
        .iter()
        .map(|row| (f64::from(row.vnodes), row.keys.sd_avg))
        .collect();
    let theory: Vec<(f64, f64)> = report
        .vnodes_sweep
        .iter()
        .map(|row| (f64::from(row.vnodes), row.theory_sd_avg))
        .collect();
    let maglev = report
        .schemes
        .iter()
        .find(|s| s.scheme == "maglev")
        .map(|s| s.keys.sd_avg);
    let lo = points.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let hi = points.iter().map(|p| p.0).fold(1.0, f64::max).max(lo * 2.0);
    let top = points
        .iter()
        .chain(&theory)
        .map(|p| p.1)
        .chain(maglev)
        .fold(0.0_f64, f64::max)
        .max(1e-6)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(VNODES_TITLE, ("sans-serif", 20))
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
    let c = colour(1);
    chart
        .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
        .label("ring, measured")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    chart
        .draw_series(DashedLineSeries::new(
            theory.iter().copied(),
            8,
            5,
            BLACK.stroke_width(2),
        ))?
        .label("theory sqrt((N-1)/(N*V))")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    if let Some(sd_avg) = maglev {
        let grey = RGBColor(96, 96, 96);
        chart
            .draw_series(DashedLineSeries::new(
                [(lo, sd_avg), (hi, sd_avg)],
                2,
                4,
                grey.into(),
            ))?
            .label("maglev")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey));
    }
    legend(&mut chart)
}

fn epsilon_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &LabReport,
) -> DrawResult<DB> {
    let rows = &report.epsilon_sweep;
    let hi = rows.iter().map(|r| r.epsilon).fold(0.0, f64::max) * 1.05;
    let top = with_legend_room(
        rows.iter()
            .flat_map(|r| [r.bound, r.keys_max_avg, r.requests_max_avg])
            .fold(1.0, f64::max),
        4,
    );
    let mut chart = ChartBuilder::on(area)
        .caption(EPSILON_TITLE, ("sans-serif", 20))
        .margin(12)
        .margin_right(32)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..hi, 0.9..top)?;
    chart
        .configure_mesh()
        .x_desc("epsilon")
        .y_desc("largest load / fair share")
        .draw()?;
    let mut series: Vec<(&str, Vec<(f64, f64)>)> = vec![(
        "keys max/avg (keys bounded)",
        rows.iter().map(|r| (r.epsilon, r.keys_max_avg)).collect(),
    )];
    if report.requests != report.keys as u64 {
        series.push((
            "requests max/avg (keys bounded)",
            rows.iter()
                .map(|r| (r.epsilon, r.requests_max_avg))
                .collect(),
        ));
    }
    // Bounded on requests (its rows are at the same sorted epsilons).
    if let Some(bound) = report
        .request_bound
        .as_ref()
        .filter(|b| b.rows.len() == rows.len())
    {
        series.push((
            "requests max/avg (requests bounded)",
            bound
                .rows
                .iter()
                .map(|r| (r.epsilon, r.request_bound_requests_max_avg))
                .collect(),
        ));
    }
    for (j, (name, points)) in series.into_iter().enumerate() {
        let c = colour(j + 1);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .draw_series(DashedLineSeries::new(
            rows.iter().map(|r| (r.epsilon, r.bound)),
            8,
            5,
            BLACK.stroke_width(2),
        ))?
        .label("cap 1 + epsilon")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    legend(&mut chart)
}

/// The legend box in the upper right of a chart.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
}

/// Pixel coordinates of `position` on a circle of `radius` around `centre`: 0 at the
/// top, growing clockwise.
fn on_circle(centre: (f64, f64), radius: f64, position: f64, space: f64) -> (i32, i32) {
    let angle = TAU * position / space;
    let x = centre.0 + radius * angle.sin();
    let y = centre.1 - radius * angle.cos();
    #[expect(
        clippy::cast_possible_truncation,
        reason = "pixel coordinates of a picture a few hundred pixels wide"
    )]
    let point = (x.round() as i32, y.round() as i32);
    point
}

fn ring_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &LabReport,
    picture: &RingPicture,
) -> DrawResult<DB> {
    let title = format!(
        "the ring: each arc in the colour of the server that owns it ({} points)",
        picture.points.len()
    );
    area.titled(&title, ("sans-serif", 20))?;
    let (w, h) = area.dim_in_pixel();
    let centre = (f64::from(w) / 2.0, f64::from(h) / 2.0 + 10.0);
    let radius = (f64::from(w.min(h)) / 2.0 - 90.0).max(40.0);
    let space = picture.space;
    let points = &picture.points;
    // Arc i runs from point i-1 (exclusive) to point i, owned by point i's server.
    for (i, &(position, owner)) in points.iter().enumerate() {
        let start = if i == 0 {
            points[points.len() - 1].0 as f64 - space
        } else {
            points[i - 1].0 as f64
        };
        let end = position as f64;
        let steps = (((end - start) / space) * 360.0).ceil().max(1.0);
        let path: Vec<(i32, i32)> = (0..=float_index(steps))
            .map(|k| start + (end - start) * k as f64 / steps)
            .map(|p| on_circle(centre, radius, p, space))
            .collect();
        area.draw(&PathElement::new(path, colour(owner).stroke_width(10)))?;
    }
    let small = points.len() <= 64;
    for &(position, owner) in points.iter().filter(|_| points.len() <= 400) {
        let at = on_circle(centre, radius, position as f64, space);
        area.draw(&Circle::new(at, if small { 6 } else { 2 }, BLACK.filled()))?;
        if small {
            let label = on_circle(centre, radius + 28.0, position as f64, space);
            let text = format!("{} {}", report.servers[owner].name, position);
            area.draw(&Text::new(
                text,
                (label.0 - 20, label.1 - 6),
                ("sans-serif", 14),
            ))?;
        }
    }
    for (key, hash) in &picture.keys {
        let outer = on_circle(centre, radius - 8.0, *hash as f64, space);
        let inner = on_circle(centre, radius - 24.0, *hash as f64, space);
        area.draw(&PathElement::new([outer, inner], BLACK.stroke_width(2)))?;
        let label = on_circle(centre, radius - 46.0, *hash as f64, space);
        let shown = key.split('=').next().unwrap_or(key);
        area.draw(&Text::new(
            format!("{shown} {hash}"),
            (label.0 - 24, label.1 - 6),
            ("sans-serif", 13),
        ))?;
    }
    for (i, server) in report.servers.iter().enumerate().take(16) {
        let y = 40 + 20 * i32::try_from(i).unwrap_or(0);
        area.draw(&Rectangle::new([(20, y), (34, y + 12)], colour(i).filled()))?;
        area.draw(&Text::new(server.name.clone(), (40, y), ("sans-serif", 14)))?;
    }
    let note = format!(
        "0 at the top, clockwise to {}; a key belongs to the first point at or after it",
        if space >= 1e6 {
            format!("2^{:.0}", space.log2())
        } else {
            format!("{space}")
        }
    );
    area.draw(&Text::new(
        note,
        (20, i32::try_from(h).unwrap_or(700) - 24),
        ("sans-serif", 14),
    ))?;
    Ok(())
}
