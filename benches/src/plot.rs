//! `tally-bench --plot out.svg`: throughput and p50/p99 latency over the
//! run, one point a second, drawn with plotters as an SVG (two panels
//! sharing the time axis).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One second of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Second {
    /// When it ended, in seconds since the run began.
    pub at: f64,
    /// Operations that completed in it, per second.
    pub ops_per_s: f64,
    /// Their median latency, in ms.
    pub p50_ms: f64,
    /// Their 99th percentile latency, in ms.
    pub p99_ms: f64,
    /// Operations that failed in it.
    pub errors: u64,
}

/// Draws `series` into an SVG at `path`, titled `title`.
pub fn draw(path: &Path, title: &str, series: &[Second]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (top, bottom) = root.split_vertically(310);
    let end = series.last().map_or(1.0, |s| s.at).max(1.0);
    let top_ops = max(series.iter().map(|s| s.ops_per_s)) * 1.1;
    let top_ms = max(series.iter().map(|s| s.p99_ms)) * 1.1;

    let mut ops = ChartBuilder::on(&top)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top_ops)
        .map_err(err)?;
    ops.configure_mesh()
        .y_desc("ops/s")
        .x_desc("seconds")
        .draw()
        .map_err(err)?;
    ops.draw_series(LineSeries::new(
        series.iter().map(|s| (s.at, s.ops_per_s)),
        BLUE.stroke_width(2),
    ))
    .map_err(err)?
    .label("throughput")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    ops.configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(err)?;

    let mut ms = ChartBuilder::on(&bottom)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top_ms)
        .map_err(err)?;
    ms.configure_mesh()
        .y_desc("latency ms")
        .x_desc("seconds")
        .draw()
        .map_err(err)?;
    for (name, color, pick) in [
        ("p50", GREEN, (|s: &Second| s.p50_ms) as fn(&Second) -> f64),
        ("p99", RED, |s: &Second| s.p99_ms),
    ] {
        ms.draw_series(LineSeries::new(
            series.iter().map(|s| (s.at, pick(s))),
            color.stroke_width(2),
        ))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    ms.configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// The largest of `values`, at least 1 (an empty or flat axis still draws).
fn max(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(1.0, f64::max)
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_draws_both_panels() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run.svg");
        let series: Vec<Second> = (1..=10)
            .map(|i| Second {
                at: f64::from(i),
                ops_per_s: 50_000.0 + f64::from(i) * 100.0,
                p50_ms: 1.5,
                p99_ms: 4.0 + f64::from(i % 3),
                errors: 0,
            })
            .collect();
        draw(&path, "uniform at QUORUM", &series).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        for text in [
            "uniform at QUORUM",
            "ops/s",
            "latency ms",
            "p50",
            "p99",
            "throughput",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        assert!(svg.matches("<polyline").count() >= 3, "three lines");
    }
}
