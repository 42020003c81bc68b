//! Miss-ratio curves as SVG: hit ratio of gets against cache size (as a fraction of the
//! working set, log scale), one line per model.

use crate::mrc::MrcReport;
use plotters::prelude::*;
use std::path::Path;

/// A model's hit ratio at a point, when it ran.
type Series = fn(&crate::mrc::MrcPoint) -> Option<f64>;

const COLOURS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
];

/// Draws `report`'s curves to `path` under `title`.
pub fn mrc(path: &Path, title: &str, report: &MrcReport) -> Result<(), String> {
    let fractions: Vec<f64> = report.points.iter().map(|point| point.fraction).filter(|&f| f > 0.0).collect();
    let (Some(&min_x), Some(&max_x)) =
        (fractions.iter().min_by(|a, b| a.total_cmp(b)), fractions.iter().max_by(|a, b| a.total_cmp(b)))
    else {
        return Err("no cache sizes to plot".into());
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((min_x * 0.9..max_x * 1.1).log_scale(), 0.0..100.0)
        .map_err(|error| error.to_string())?;
    chart
        .configure_mesh()
        .x_desc("cache size / working set (log scale)")
        .y_desc("hit ratio of gets (%)")
        .x_label_formatter(&|x| format!("{x}"))
        .draw()
        .map_err(|error| error.to_string())?;
    let models: [(&str, Series); 7] = [
        ("exact LRU", |p| p.lru),
        ("exact FIFO", |p| p.fifo),
        ("exact S3-FIFO", |p| p.s3fifo),
        ("Segcache Merge", |p| p.merge),
        ("idealised LFU", |p| p.lfu),
        ("engine", |p| p.engine),
        ("server estimate (stats mrc)", |p| p.live),
    ];
    for (index, (name, value)) in models.iter().enumerate() {
        let points: Vec<(f64, f64)> = report
            .points
            .iter()
            .filter_map(|point| value(point).map(|ratio| (point.fraction, ratio * 100.0)))
            .filter(|&(fraction, _)| fraction > 0.0)
            .collect();
        if points.is_empty() {
            continue;
        }
        let colour = COLOURS[index % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(|error| error.to_string())?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&point| Circle::new(point, 3, colour.filled())))
            .map_err(|error| error.to_string())?;
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
