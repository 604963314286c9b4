//! The heatmap: Mpps (or cycles per packet) over Rx descriptors (x) ×
//! mempool cache (y), one cell
//! per pair at the plane's fixed Tx descriptors and burst, drawn with
//! `plotters` to SVG (text is left to the viewer's fonts: no font library).
//!
//! Each cell is one `<rect>` filled from the viridis map between the
//! plane's lowest and highest value, labelled with it; a cell the
//! sweep did not reach is grey and labelled `-`. A colour bar of
//! [`BAR_STEPS`] rectangles sits on the right.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Rectangles in the colour bar.
pub const BAR_STEPS: usize = 32;

/// What to draw.
pub struct Heatmap<'a> {
    /// The title.
    pub title: &'a str,
    /// The colour bar's caption (the cells' unit).
    pub unit: &'a str,
    /// The x axis values (Rx descriptors).
    pub x: &'a [u16],
    /// The y axis values (cache sizes).
    pub y: &'a [u32],
    /// The value per cell, `cells[xi][yi]`; `None`: not measured.
    pub cells: &'a [Vec<Option<f64>>],
}

/// The fill of a value between `lo` and `hi`.
fn color(v: f64, lo: f64, hi: f64) -> RGBColor {
    if hi - lo < 1e-12 {
        return ViridisRGB::get_color(0.5f64);
    }
    ViridisRGB::get_color_normalized(v.clamp(lo, hi), lo, hi)
}

/// A label colour that reads on `c`.
fn ink(c: RGBColor) -> RGBColor {
    let luma = 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
    if luma > 128.0 { BLACK } else { WHITE }
}

/// Writes the heatmap to `path` as SVG.
pub fn write_svg(path: &Path, h: &Heatmap<'_>) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let (nx, ny) = (h.x.len(), h.y.len());
    let width = (230 + 100 * nx as u32).max(640);
    let height = (180 + 56 * ny as u32).max(420);
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (main, bar) = root.split_horizontally(width - 120);
    let values: Vec<f64> = h.cells.iter().flatten().flatten().copied().collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if values.is_empty() {
        (0.0, 1.0)
    } else {
        (lo, hi)
    };

    // In chart units cell (xi, yi) spans [2xi, 2xi + 2] × [2yi, 2yi + 2],
    // so its centre, where the tick and the label go, is a whole number.
    let centres = |n: usize| (0..n as i32).map(|i| 2 * i + 1).collect::<Vec<i32>>();
    let mut chart = ChartBuilder::on(&main)
        .caption(h.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(52)
        .y_label_area_size(72)
        .build_cartesian_2d(
            (0..2 * nx as i32).with_key_points(centres(nx)),
            (0..2 * ny as i32).with_key_points(centres(ny)),
        )
        .map_err(|e| err(&e))?;
    let tick = |v: i32, n: usize, name: &dyn Fn(usize) -> String| {
        let i = (v - 1) / 2;
        if v % 2 == 1 && i >= 0 && (i as usize) < n {
            name(i as usize)
        } else {
            String::new()
        }
    };
    let xs = |i: usize| h.x[i].to_string();
    let ys = |i: usize| h.y[i].to_string();
    chart
        .configure_mesh()
        .disable_mesh()
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 16))
        .x_desc("Rx descriptors per queue (nb_rxd)")
        .y_desc("mempool cache size")
        .x_label_formatter(&|v| tick(*v, nx, &xs))
        .y_label_formatter(&|v| tick(*v, ny, &ys))
        .draw()
        .map_err(|e| err(&e))?;
    let grey = RGBColor(200, 200, 200);
    let mut cells = Vec::with_capacity(nx * ny);
    let mut labels = Vec::with_capacity(nx * ny);
    for (xi, col) in h.cells.iter().enumerate().take(nx) {
        for (yi, v) in col.iter().enumerate().take(ny) {
            let (x, y) = (2 * xi as i32, 2 * yi as i32);
            let fill = v.map_or(grey, |v| color(v, lo, hi));
            cells.push(Rectangle::new([(x, y), (x + 2, y + 2)], fill.filled()));
            let text = v.map_or("-".to_string(), |v| format!("{v:.2}"));
            let style = ("sans-serif", 16)
                .into_font()
                .color(&ink(fill))
                .pos(Pos::new(HPos::Center, VPos::Center));
            labels.push(Text::new(text, (x + 1, y + 1), style));
        }
    }
    chart.draw_series(cells).map_err(|e| err(&e))?;
    chart.draw_series(labels).map_err(|e| err(&e))?;

    let mut scale = ChartBuilder::on(&bar)
        .margin_top(40)
        .margin_bottom(56)
        .margin_right(8)
        .y_label_area_size(60)
        .caption(h.unit, ("sans-serif", 16))
        .build_cartesian_2d(0.0..1.0, lo..hi.max(lo + 1e-9))
        .map_err(|e| err(&e))?;
    scale
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .label_style(("sans-serif", 14))
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()
        .map_err(|e| err(&e))?;
    let step = (hi - lo) / BAR_STEPS as f64;
    scale
        .draw_series((0..BAR_STEPS).map(|k| {
            let a = lo + step * k as f64;
            let b = if k + 1 == BAR_STEPS { hi } else { a + step };
            Rectangle::new([(0.0, a), (1.0, b)], color(a + step / 2.0, lo, hi).filled())
        }))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
