//! SVG charts with plotters: grouped bars of tok/s per corpus, and tok/s against K per corpus.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::configs::ServeConfig;

use super::table::{is_best_k, Table};

fn colour(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// Bars: one group per corpus, one bar per measured configuration.
pub fn bars_by_corpus(table: &Table, path: &Path) -> Result<()> {
    let configs: Vec<&String> = table.measured_configs().collect();
    let max = table
        .cells
        .values()
        .map(|c| c.tok_s)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let groups = table.corpora.len().max(1);
    let width = (160 + groups * (configs.len() * 14 + 30)).clamp(640, 2400) as u32;
    let root = SVGBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let corpora = table.corpora.clone();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Output tokens/s by corpus — {}", table.model),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..groups as f64, 0f64..max)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                corpora.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("output tokens/s (median over runs)")
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let bar = 0.8 / configs.len().max(1) as f64;
    for (j, config) in configs.iter().enumerate() {
        let style = colour(j).filled();
        let bars: Vec<Rectangle<(f64, f64)>> = table
            .corpora
            .iter()
            .enumerate()
            .filter_map(|(i, corpus)| {
                let cell = table.get(corpus, config)?;
                let x0 = i as f64 + 0.1 + j as f64 * bar;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + bar * 0.9, cell.tok_s)],
                    style,
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| anyhow!("{e:?}"))?
            .label(config.as_str())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour(j).filled())
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

/// Lines: tok/s against K, one line per corpus for padded fixed-K suffix configurations
/// (circles) and unpadded ones (triangles). Returns false (no file) without fixed-K results.
pub fn throughput_vs_k(table: &Table, path: &Path) -> Result<bool> {
    let fixed: Vec<(ServeConfig, &String)> = table
        .measured_configs()
        .filter(|c| !is_best_k(c))
        .filter_map(|c| {
            Some((
                ServeConfig::parse(c).ok().filter(|s| s.is_fixed_suffix())?,
                c,
            ))
        })
        .collect();
    if fixed.is_empty() {
        return Ok(false);
    }
    let k_max = fixed.iter().filter_map(|(s, _)| s.k).max().unwrap_or(12) as f64 + 1.0;
    let y_max = table
        .cells
        .values()
        .map(|c| c.tok_s)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let root = SVGBackend::new(path, (820, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Output tokens/s against K — {}", table.model),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..k_max, 0f64..y_max)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("K (draft length)")
        .y_desc("output tokens/s")
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (i, corpus) in table.corpora.iter().enumerate() {
        for padded in [true, false] {
            let mut points: Vec<(f64, f64)> = fixed
                .iter()
                .filter(|(s, _)| s.padded == padded)
                .filter_map(|(s, name)| Some((s.k? as f64, table.get(corpus, name)?.tok_s)))
                .collect();
            if points.is_empty() {
                continue;
            }
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = colour(i);
            let label = if padded {
                corpus.clone()
            } else {
                format!("{corpus} (no pad)")
            };
            let line_style = if padded {
                c.stroke_width(2)
            } else {
                c.mix(0.5).stroke_width(1)
            };
            chart
                .draw_series(LineSeries::new(points.clone(), line_style))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            if padded {
                chart
                    .draw_series(points.iter().map(|p| Circle::new(*p, 4, c.filled())))
                    .map_err(|e| anyhow!("{e:?}"))?;
            } else {
                chart
                    .draw_series(
                        points
                            .iter()
                            .map(|p| TriangleMarker::new(*p, 4, c.mix(0.6).filled())),
                    )
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(true)
}
