//! Plots a person would rather look at than read: latency against throughput (one curve per
//! server, p50 and p99) and a bar chart per partition, as SVG.

use crate::load::LoadReport;
use plotters::prelude::*;
use std::path::Path;

/// One server's latency-throughput curve.
#[derive(Clone, Debug)]
pub struct Curve {
    /// Legend name.
    pub name: String,
    /// (delivered ops/s, p50 µs, p99 µs), in offered order.
    pub points: Vec<(f64, f64, f64)>,
}

impl Curve {
    /// The curve of a sweep's open-loop points.
    pub fn of(name: &str, points: &[LoadReport]) -> Curve {
        Curve {
            name: name.to_string(),
            points: points.iter().map(|point| (point.ops_per_sec, point.p50_us, point.p99_us)).collect(),
        }
    }
}

/// A title naming a run's workload.
pub fn title(report: &LoadReport) -> String {
    let workload = match report.ycsb {
        Some(ycsb) => format!("YCSB {ycsb:?}"),
        None => format!("{:.0}% GET", report.get_ratio * 100.0),
    };
    format!(
        "{:?} {:?}, {}, {}, {} connections x depth {}",
        report.protocol, report.dataset, workload, report.dist, report.connections, report.depth
    )
    .to_lowercase()
}

const COLOURS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Latency (log scale, µs) against delivered throughput: p99 solid, p50 thin, per curve.
pub fn latency_curves(path: &Path, title: &str, curves: &[Curve]) -> Result<(), String> {
    let max_x = curves.iter().flat_map(|curve| curve.points.iter()).map(|point| point.0).fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let x = XAxis {
        range: 0.0..max_x * 1.05,
        desc: "delivered operations per second",
        label: &|x| format!("{:.0}k", x / 1e3),
    };
    latency_panel(&root, (title, 18), &x, curves, 2.0)?;
    root.present().map_err(|error| error.to_string())
}

/// Latency (log scale, µs) against the fraction of each server's own maximum offered (%), a
/// panel per (caption, curves) side by side: p99 solid with its points, p50 thin. Each curve's
/// points are (percent of maximum, p50 µs, p99 µs).
pub fn fraction_panels(path: &Path, title: &str, panels: &[(String, Vec<Curve>)]) -> Result<(), String> {
    let root = SVGBackend::new(path, (520 * panels.len().max(1) as u32, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let root = root.titled(title, ("sans-serif", 18)).map_err(|error| error.to_string())?;
    let x = XAxis {
        range: 40.0..100.0,
        desc: "offered load, % of the server's own maximum",
        label: &|x| format!("{x:.0}%"),
    };
    for (area, (caption, curves)) in root.split_evenly((1, panels.len().max(1))).iter().zip(panels) {
        latency_panel(area, (caption, 16), &x, curves, 3.0)?;
    }
    root.present().map_err(|error| error.to_string())
}

/// A latency chart's horizontal axis: its range, what it shows, how a value reads.
struct XAxis<'a> {
    range: std::ops::Range<f64>,
    desc: &'a str,
    label: &'a dyn Fn(&f64) -> String,
}

/// One latency chart in `area`: each curve's p99 (solid, with its points) and p50 (thin) on a
/// log scale of µs, `headroom` times the largest latency at the top.
fn latency_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    (caption, caption_size): (&str, u32),
    x: &XAxis,
    curves: &[Curve],
    headroom: f64,
) -> Result<(), String> {
    let all = curves.iter().flat_map(|curve| curve.points.iter());
    let max_y = all.clone().map(|point| point.2.max(point.1)).fold(10.0, f64::max) * headroom;
    let min_y =
        all.map(|point| point.1.min(point.2)).fold(f64::INFINITY, f64::min).clamp(1.0, max_y / 10.0) / 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", caption_size))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x.range.clone(), (min_y..max_y).log_scale())
        .map_err(|error| error.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc("latency (µs, log scale)")
        .x_label_formatter(x.label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|error| error.to_string())?;
    for (index, curve) in curves.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let p99: Vec<(f64, f64)> = curve.points.iter().map(|point| (point.0, point.2.max(min_y))).collect();
        let p50: Vec<(f64, f64)> = curve.points.iter().map(|point| (point.0, point.1.max(min_y))).collect();
        chart
            .draw_series(LineSeries::new(p99.clone(), colour.stroke_width(2)))
            .map_err(|error| error.to_string())?
            .label(format!("{} p99", curve.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart
            .draw_series(p99.iter().map(|&point| Circle::new(point, 3, colour.filled())))
            .map_err(|error| error.to_string())?;
        chart
            .draw_series(LineSeries::new(p50, colour.stroke_width(1)))
            .map_err(|error| error.to_string())?
            .label(format!("{} p50", curve.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|error| error.to_string())
}

/// A bar per label (e.g. per partition), one colour per series, side by side.
pub fn bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    labels: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    bar_panel(&root, &Panel { title, x_desc, y_desc, labels, series }, false)?;
    root.present().map_err(|error| error.to_string())
}

/// One bar chart: a group of bars per label, one bar (one colour) per series.
pub struct Panel<'a> {
    /// The caption.
    pub title: &'a str,
    /// What the labels are.
    pub x_desc: &'a str,
    /// What the values are.
    pub y_desc: &'a str,
    /// A group per label.
    pub labels: &'a [String],
    /// (legend name, a value per label).
    pub series: &'a [(String, Vec<f64>)],
}

/// Bar charts side by side in one SVG under a common title (e.g. requests per second beside
/// p99 latency), each value written above its bar.
pub fn bar_panels(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    let width = 560 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|error| error.to_string())?;
    for (area, panel) in root.split_evenly((1, panels.len().max(1))).iter().zip(panels) {
        // The values over the bars: the picture's figures are readable without a ruler.
        bar_panel(area, panel, true)?;
    }
    root.present().map_err(|error| error.to_string())
}

/// A value in three significant figures, with k or M for thousands and millions.
fn short_number(value: f64) -> String {
    match value {
        0.0 => "0".to_string(),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e3 => format!("{:.0}k", v / 1e3),
        v if v >= 10.0 => format!("{v:.0}"),
        v if v >= 1.0 => format!("{v:.2}"),
        v => format!("{v:.3}"),
    }
}

/// The top of a panel's value axis: room above the tallest bar for its value and, with
/// `legend_rows` series in the legend, for the legend too (so it hides no bar).
fn panel_max(series: &[(String, Vec<f64>)], legend_rows: usize) -> f64 {
    let max = series.iter().flat_map(|(_, values)| values.iter().copied()).fold(0.0, f64::max);
    if max > 0.0 {
        max * (1.15 + 0.09 * legend_rows as f64)
    } else {
        1.0
    }
}

fn bar_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    values_over_bars: bool,
) -> Result<(), String> {
    let max_y = panel_max(panel.series, if values_over_bars { panel.series.len() } else { 0 });
    let count = panel.labels.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..count as f64, 0.0..max_y)
        .map_err(|error| error.to_string())?;
    let names = panel.labels.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels((2 * count + 1).min(65))
        .x_label_formatter(&move |x| {
            let index = x.floor() as usize;
            if (*x - index as f64 - 0.5).abs() < 0.01 {
                names.get(index).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .y_label_formatter(&|y| short_number(*y))
        .draw()
        .map_err(|error| error.to_string())?;
    let width = 0.8 / panel.series.len().max(1) as f64;
    for (index, (name, values)) in panel.series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        chart
            .draw_series(values.iter().enumerate().map(|(bar, &value)| {
                let left = bar as f64 + 0.1 + index as f64 * width;
                Rectangle::new([(left, 0.0), (left + width, value)], colour.filled())
            }))
            .map_err(|error| error.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        if values_over_bars {
            use plotters::style::text_anchor::{HPos, Pos, VPos};
            let style =
                TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
            chart
                .draw_series(values.iter().enumerate().map(|(bar, &value)| {
                    let centre = bar as f64 + 0.1 + (index as f64 + 0.5) * width;
                    Text::new(short_number(value), (centre, value + max_y * 0.01), style.clone())
                }))
                .map_err(|error| error.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_written_as_svg() {
        let dir = std::env::temp_dir().join(format!("qs-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let curves = [
            Curve {
                name: "a".into(),
                points: vec![(1e3, 20.0, 40.0), (2e3, 25.0, 80.0), (3e3, 60.0, 900.0)],
            },
            Curve { name: "b".into(), points: vec![(1e3, 30.0, 50.0), (1.5e3, 300.0, 5000.0)] },
        ];
        let path = dir.join("curves.svg");
        latency_curves(&path, "test curves", &curves).expect("curves drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg") && svg.contains("test curves") && svg.contains("a p99"));
        let labels: Vec<String> = (0..4).map(|i| i.to_string()).collect();
        let path = dir.join("bars.svg");
        bars(
            &path,
            "test bars",
            "partition",
            "%",
            &labels,
            &[("share".into(), vec![25.0, 24.0, 26.0, 25.0])],
        )
        .expect("bars drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.contains("test bars") && svg.matches("<rect").count() >= 5);
        let path = dir.join("panels.svg");
        let series = [("a".to_string(), vec![1.5e6, 2e5]), ("b".to_string(), vec![4e5, 3.0])];
        let panel = |title| Panel { title, x_desc: "", y_desc: "", labels: &labels[..2], series: &series };
        bar_panels(&path, "two panels", &[panel("left"), panel("right")]).expect("panels drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.contains("two panels") && svg.contains("left") && svg.contains("right"));
        assert!(
            svg.contains("1.50M") && svg.contains("200k") && svg.contains("3.00"),
            "values over bars: {svg}"
        );
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}

/// One panel of a scaling plot: a workload, and a line per server of (workers, requests/s).
#[derive(Clone, Debug)]
pub struct ScalingPanel {
    /// The workload (mix, keys, depth).
    pub title: String,
    /// (server, (workers, requests per second) in workers' order).
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

/// Requests per second against workers (cores), a panel per workload, a line per server, as
/// `scripts/bench-scaling.py` measures them.
pub fn scaling(path: &Path, title: &str, panels: &[ScalingPanel]) -> Result<(), String> {
    let columns = panels.len().clamp(1, 4);
    let rows = panels.len().div_ceil(columns).max(1);
    let root = SVGBackend::new(path, (420 * columns as u32, 320 * rows as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|error| error.to_string())?;
    for (area, panel) in root.split_evenly((rows, columns)).iter().zip(panels) {
        let points = panel.lines.iter().flat_map(|(_, points)| points.iter());
        let max_x = points.clone().map(|point| point.0).fold(1.0, f64::max);
        let max_y = points.map(|point| point.1).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0.5..max_x + 0.5, 0.0..max_y)
            .map_err(|error| error.to_string())?;
        chart
            .configure_mesh()
            .x_desc("workers (cores)")
            .y_desc("requests/s")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{:.0}k", y / 1e3))
            .draw()
            .map_err(|error| error.to_string())?;
        for (index, (server, points)) in panel.lines.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
                .map_err(|error| error.to_string())?
                .label(server.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            chart
                .draw_series(points.iter().map(|&point| Circle::new(point, 3, colour.filled())))
                .map_err(|error| error.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|error| error.to_string())?;
    }
    root.present().map_err(|error| error.to_string())
}

/// The panels of a `scripts/bench-scaling.py` report (its `--out` JSON): one per workload, in
/// the order the report first names them.
pub fn scaling_panels(report: &serde_json::Value) -> Vec<ScalingPanel> {
    let mut panels: Vec<ScalingPanel> = Vec::new();
    for point in report["points"].as_array().into_iter().flatten() {
        let title = format!(
            "{}, {} keys, depth {}",
            point["mix"].as_str().unwrap_or("?"),
            point["keys"].as_str().unwrap_or("?"),
            point["depth"].as_u64().unwrap_or(0)
        );
        let server = point["server"].as_str().unwrap_or("?").to_string();
        let xy =
            (point["workers"].as_f64().unwrap_or(0.0), point["requests_per_sec"].as_f64().unwrap_or(0.0));
        let index = match panels.iter().position(|panel| panel.title == title) {
            Some(index) => index,
            None => {
                panels.push(ScalingPanel { title, lines: Vec::new() });
                panels.len() - 1
            }
        };
        let lines = &mut panels[index].lines;
        match lines.iter_mut().find(|(name, _)| *name == server) {
            Some((_, points)) => points.push(xy),
            None => lines.push((server, vec![xy])),
        }
    }
    panels
}

#[cfg(test)]
mod scaling_tests {
    use super::*;

    #[test]
    fn a_scaling_report_becomes_a_panel_per_workload_and_a_line_per_server() {
        let report = serde_json::json!({"cores": 16, "points": [
            {"workers": 1, "mix": "95% gets", "keys": "uniform", "depth": 1, "server": "memcached", "requests_per_sec": 100.0},
            {"workers": 1, "mix": "95% gets", "keys": "uniform", "depth": 1, "server": "quicksilver", "requests_per_sec": 150.0},
            {"workers": 2, "mix": "95% gets", "keys": "uniform", "depth": 1, "server": "memcached", "requests_per_sec": 190.0},
            {"workers": 2, "mix": "95% gets", "keys": "uniform", "depth": 1, "server": "quicksilver", "requests_per_sec": 300.0},
            {"workers": 1, "mix": "50% gets", "keys": "zipf", "depth": 16, "server": "memcached", "requests_per_sec": 90.0},
        ]});
        let panels = scaling_panels(&report);
        assert_eq!(panels.len(), 2);
        assert_eq!(panels[0].title, "95% gets, uniform keys, depth 1");
        assert_eq!(panels[0].lines[1], ("quicksilver".to_string(), vec![(1.0, 150.0), (2.0, 300.0)]));
        let path = std::env::temp_dir().join(format!("qs-scaling-{}.svg", std::process::id()));
        scaling(&path, "scaling", &panels).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        std::fs::remove_file(&path).ok();
        assert!(svg.contains("quicksilver") && svg.contains("<svg"));
    }
}

/// The fleet's hit ratio (%) each second while a node is replaced, a line per mode of a
/// `scripts/bench-warm.py` report, with the moment of the replacement marked.
pub fn hit_ratio(path: &Path, report: &serde_json::Value) -> Result<(), String> {
    let runs = report["runs"].as_array().cloned().unwrap_or_default();
    let lines: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|run| {
            let points = run["samples"].as_array().into_iter().flatten();
            let points = points
                .filter_map(|sample| Some((sample["t"].as_f64()?, sample["ratio"].as_f64()? * 100.0)))
                .collect();
            (run["mode"].as_str().unwrap_or("?").to_string(), points)
        })
        .collect();
    let first = runs.first().cloned().unwrap_or_default();
    let replaced = first["replaced_at"].as_f64().unwrap_or(0.0);
    let max_x = lines.iter().flat_map(|(_, points)| points.iter()).map(|point| point.0).fold(1.0, f64::max);
    let min_y = lines.iter().flat_map(|(_, points)| points.iter()).map(|point| point.1).fold(100.0, f64::min);
    let min_y = (min_y - 5.0).clamp(0.0, 95.0).floor();
    let title = format!(
        "fleet hit ratio, one of 3 nodes replaced at {replaced:.0} s ({} keys, -m {} per node)",
        first["keys"], first["memory_mb"]
    );
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..max_x, min_y..100.5)
        .map_err(|error| error.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("hit ratio")
        .y_label_formatter(&|y| format!("{y:.0}%"))
        .draw()
        .map_err(|error| error.to_string())?;
    chart
        .draw_series(LineSeries::new([(replaced, min_y), (replaced, 100.5)], BLACK.mix(0.4).stroke_width(1)))
        .map_err(|error| error.to_string())?;
    for (index, (mode, points)) in lines.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(|error| error.to_string())?
            .label(mode.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|error| error.to_string())?;
    root.present().map_err(|error| error.to_string())
}
