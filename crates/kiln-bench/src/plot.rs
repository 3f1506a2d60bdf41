//! SVG plots of runs: latency CDFs, and throughput against concurrency.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::{Error, Result};
use crate::report::RunReport;

/// Points per CDF line at most (the SVG stays small; the shape doesn't change).
const MAX_CDF_POINTS: usize = 1000;
const SIZE: (u32, u32) = (900, 560);
/// The left edge of latency axes at the least (log scales can't start at 0).
const MIN_LATENCY_MS: f64 = 0.01;

/// Draws every plot the runs support into `dir` (created if needed): the TTFT, ITL and
/// E2E CDFs, and `throughput.svg` when the runs span two or more concurrencies.
pub fn draw_all(dir: &Path, runs: &[RunReport]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut written = Vec::new();
    type Samples = fn(&RunReport) -> Vec<f64>;
    let kinds: [(&str, &str, Samples); 3] = [
        ("ttft", "Time to first token", |r| {
            ok(r).filter_map(|q| q.ttft_ms).collect()
        }),
        ("itl", "Inter-token latency", |r| {
            ok(r).flat_map(|q| q.itl_ms.iter().copied()).collect()
        }),
        ("e2e", "End-to-end latency", |r| {
            ok(r).map(|q| q.e2e_ms).collect()
        }),
    ];
    for (file, title, samples) in kinds {
        let series: Vec<(String, Vec<f64>)> = runs
            .iter()
            .map(|r| (series_name(r), samples(r)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let path = dir.join(format!("{file}_cdf.svg"));
        cdf_plot(&path, title, &series)?;
        written.push(path);
    }
    let path = dir.join("throughput.svg");
    if throughput_plot(&path, runs)? {
        written.push(path);
    }
    Ok(written)
}

fn ok(r: &RunReport) -> impl Iterator<Item = &crate::client::RequestRecord> {
    r.requests.iter().filter(|q| q.ok())
}

fn series_name(r: &RunReport) -> String {
    match r.max_concurrency {
        Some(c) => format!("{} c={c}", r.label),
        None => r.label.clone(),
    }
}

fn plot_err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> Error + '_ {
    move |e| Error::Plot {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// One CDF line per series: x = latency (ms, log scale: latencies span orders of
/// magnitude under load), y = fraction of samples at or below it.
fn cdf_plot(path: &Path, title: &str, series: &[(String, Vec<f64>)]) -> Result<()> {
    let err = plot_err(path);
    let all = || series.iter().flat_map(|(_, s)| s.iter().copied());
    let x_max = all().fold(MIN_LATENCY_MS, f64::max) * 1.1;
    // Zero gaps (several events in one read) sit at the axis' left edge.
    let x_min = all()
        .filter(|&x| x > 0.0)
        .fold(f64::INFINITY, f64::min)
        .max(MIN_LATENCY_MS)
        .min(x_max / 10.0)
        / 1.5;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title} (CDF)"), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0f64..1.0f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| format!("{x}"))
        .x_desc(format!("{title} (ms, log scale)"))
        .y_desc("fraction of samples")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, samples)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                cdf_points(samples, x_min),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// The empirical CDF as a step-free polyline through at most [`MAX_CDF_POINTS`] points.
fn cdf_points(samples: &[f64], floor: f64) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = samples.iter().map(|&x| x.max(floor)).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = n.div_ceil(MAX_CDF_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = v.last() {
        pts.push((last, 1.0));
    }
    pts
}

/// Output tok/s against concurrency, one line per server label; `false` (nothing
/// drawn) unless some label has runs at two or more concurrencies.
fn throughput_plot(path: &Path, runs: &[RunReport]) -> Result<bool> {
    let mut labels: Vec<&str> = Vec::new();
    for r in runs {
        if !labels.contains(&r.label.as_str()) {
            labels.push(&r.label);
        }
    }
    let lines: Vec<(&str, Vec<(f64, f64)>)> = labels
        .iter()
        .map(|&l| {
            let mut pts: Vec<(f64, f64)> = runs
                .iter()
                .filter(|r| r.label == l)
                .filter_map(|r| Some((r.max_concurrency? as f64, r.output_throughput)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (l, pts)
        })
        .filter(|(_, p)| p.len() >= 2)
        .collect();
    if lines.is_empty() {
        return Ok(false);
    }
    let err = plot_err(path);
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let x_max = all().map(|p| p.0).fold(1.0, f64::max);
    let y_max = all().map(|p| p.1).fold(1e-3, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Output throughput vs concurrency", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..x_max * 1.05).log_scale(), 0f64..y_max * 1.1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("max concurrency (log scale)")
        .y_desc("output tokens / s")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (label, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(*label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}
