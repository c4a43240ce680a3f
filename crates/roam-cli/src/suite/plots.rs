//! The suite's PNG figures, drawn with plotters' bitmap backend. Each figure is a grid of
//! panels, one per workload (rows) and network profile (columns), with the number of nodes on
//! a log2 x axis; a line joins the medians over repetitions and a vertical bar spans their
//! min–max. A mode that a workload ran with several sampling schemes has a line per scheme
//! (`lapse[pool:4]`, shades of the mode's colour); the speed-up figures take each mode's
//! default scheme. The quality figures of the workloads that report one plot the quality
//! metric against the CPU overhead ratio and against the epoch time, a point per
//! configuration and node count. Text uses the DejaVu Sans Mono font bundled in `assets/`
//! (through ab_glyph), so no system font or fontconfig is needed.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::plan::{App, Mode, Profile};
use super::summary::{CPU_OVERHEAD_AIM, Cell, CellKey, SchemeName, Stat, Summary, metric_label};

/// The bundled font (DejaVu Sans Mono; Bitstream Vera licence, see `assets/`).
pub(crate) const FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");
/// The family name the font is registered under.
pub(crate) const FAMILY: &str = "roam-sans";

/// One line of a panel: (nodes, median, min, max) points.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(u32, Stat)>,
}

/// One panel of a figure: its lines ([`Series`]) or point clouds ([`Cloud`]).
struct Panel<S> {
    app: App,
    title: String,
    series: Vec<S>,
}

/// How a figure's y axis works.
#[derive(Clone, Copy)]
struct YAxis {
    label: &'static str,
    log: bool,
    /// Fixed range (linear axes), else fitted to the data.
    fixed: Option<(f64, f64)>,
    /// Dashed reference lines (e.g. speed-up 1).
    references: &'static [f64],
}

/// Colour of a mode's lines.
fn mode_color(mode: Mode) -> RGBColor {
    match mode {
        Mode::Single => RGBColor(90, 90, 90),
        Mode::Classic => RGBColor(31, 119, 180),
        Mode::ClassicNolocal => RGBColor(255, 127, 14),
        Mode::Lapse => RGBColor(44, 160, 44),
        Mode::Nups => RGBColor(214, 39, 40),
        Mode::NupsReplicateOnly => RGBColor(148, 103, 189),
        Mode::Adapm => RGBColor(140, 86, 75),
        Mode::AdapmRelocateOnly => RGBColor(188, 189, 34),
        Mode::AdapmReplicateOnly => RGBColor(23, 190, 207),
    }
}

/// Colour of the `i`-th of `n` schemes of a mode: the mode's colour, lighter for the first,
/// darker for the last.
fn variant_color(mode: Mode, i: usize, n: usize) -> RGBColor {
    let base = mode_color(mode);
    if n <= 1 {
        return base;
    }
    // From 45 % towards white to 45 % towards black.
    let t = i as f64 / (n - 1) as f64 * 0.9 - 0.45;
    let mix = |c: u8| {
        let c = f64::from(c);
        let v = if t < 0.0 {
            c + (255.0 - c) * -t
        } else {
            c * (1.0 - t)
        };
        v.round().clamp(0.0, 255.0) as u8
    };
    RGBColor(mix(base.0), mix(base.1), mix(base.2))
}

/// The configurations of `modes` in one group, each as its key at one node and its colour:
/// every mode with each scheme the workload ran it with ([`Summary::scheme_keys`]), in shades of
/// the mode's colour.
fn configurations(
    summary: &Summary,
    (app, profile, w): (App, Profile, u32),
    modes: &[Mode],
) -> Vec<(CellKey, RGBColor)> {
    let mut out = Vec::new();
    for &mode in modes {
        let keys = summary.scheme_keys(app, profile, w, mode, 1);
        let n = keys.len();
        out.extend(
            keys.into_iter()
                .enumerate()
                .map(|(i, key)| (key, variant_color(mode, i, n))),
        );
    }
    out
}

/// Draws every figure into `dir`; returns the files written.
pub(crate) fn draw_all(summary: &Summary, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    // Registering twice (a second suite in one process) keeps the first registration.
    plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled font does not parse"))?;
    let groups = summary.groups();
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let per_mode = |modes: &[Mode], value: &dyn Fn(CellKey) -> Option<Stat>| {
        panels(&groups, |app, profile, w| {
            configurations(summary, (app, profile, w), modes)
                .into_iter()
                .map(|(key, color)| Series {
                    label: summary.label(key),
                    color,
                    points: node_points(summary, key.mode, |nodes| value(CellKey { nodes, ..key })),
                })
                .collect()
        })
    };
    // Epoch time of each mode of `overs` over that of `of`, at `of`'s node counts.
    let speedups_of = |of: Mode, overs: &[Mode]| {
        panels(&groups, |app, profile, w| {
            overs
                .iter()
                .map(|&over| Series {
                    label: format!("over {}", over.name()),
                    color: mode_color(over),
                    points: node_points(summary, of, |nodes| {
                        let key = CellKey {
                            app,
                            profile,
                            workers_per_node: w,
                            mode: of,
                            sampling: summary.default_scheme(app, of),
                            nodes,
                        };
                        summary.speedup_of(of, key, over)
                    }),
                })
                .collect()
        })
    };
    // The modes that ran, `single` first.
    let all = summary.modes();
    let distributed: Vec<Mode> = all.iter().copied().filter(|&m| m != Mode::Single).collect();
    let mut written = Vec::new();
    let mut figure = |name: &str, title: &str, panels: Vec<Panel<Series>>, y: YAxis| {
        let path = dir.join(name);
        draw(&path, title, &panels, groups_columns(&groups), y)
            .with_context(|| format!("drawing {}", path.display()))?;
        written.push(path);
        anyhow::Ok(())
    };
    figure(
        "epoch_time.png",
        "Epoch time (s) by nodes and mode",
        per_mode(&all, &|k| summary.cell(k)?.epoch_seconds),
        YAxis {
            label: "seconds per epoch",
            log: true,
            fixed: None,
            references: &[],
        },
    )?;
    figure(
        "speedup.png",
        "Speed-up of lapse (other mode's epoch time / lapse's)",
        speedups_of(Mode::Lapse, &[Mode::Classic, Mode::ClassicNolocal]),
        YAxis {
            label: "speed-up",
            log: true,
            fixed: None,
            references: &[1.0],
        },
    )?;
    if all.iter().any(|m| m.replicates()) {
        let overs: Vec<Mode> = [Mode::Lapse, Mode::Classic, Mode::NupsReplicateOnly]
            .into_iter()
            .filter(|m| all.contains(m))
            .collect();
        figure(
            "speedup_nups.png",
            "Speed-up of nups (other mode's epoch time / nups's)",
            speedups_of(Mode::Nups, &overs),
            YAxis {
                label: "speed-up",
                log: true,
                fixed: None,
                references: &[1.0],
            },
        )?;
    }
    figure(
        "local_fraction.png",
        "Fraction of key accesses served locally",
        per_mode(&distributed, &|k| summary.cell(k)?.local_fraction),
        YAxis {
            label: "local fraction",
            log: false,
            fixed: Some((0.0, 1.05)),
            references: &[],
        },
    )?;
    figure(
        "bytes_per_point.png",
        "Bytes sent per data point (all nodes)",
        per_mode(&distributed, &|k| {
            summary.cell(k)?.bytes_per_point.filter(|s| s.min > 0.0)
        }),
        YAxis {
            label: "bytes per data point",
            log: true,
            fixed: None,
            references: &[],
        },
    )?;
    figure(
        "cpu_overhead.png",
        &format!(
            "CPU overhead ratio: CPU s per epoch, all nodes / single's (aim <= {CPU_OVERHEAD_AIM})"
        ),
        per_mode(&all, &|k| summary.overhead(k)),
        YAxis {
            label: "CPU overhead ratio",
            log: true,
            fixed: None,
            references: &[1.0, CPU_OVERHEAD_AIM],
        },
    )?;
    written.extend(draw_quality(summary, dir)?);
    Ok(written)
}

/// The file names of the quality figures: quality against the CPU overhead ratio, and against
/// the epoch time.
pub(crate) const QUALITY_FIGURES: [&str; 2] = ["quality_cpu.png", "quality_epoch_time.png"];

/// One configuration (mode and scheme) of a quality panel: (nodes, (x, quality)) points.
struct Cloud {
    label: String,
    color: RGBColor,
    sampling: SchemeName,
    points: Vec<(u32, (Stat, Stat))>,
}

/// The marker of a scheme's family.
#[derive(Clone, Copy)]
enum Marker {
    /// No scheme, or naive.
    Circle,
    /// preloc.
    Triangle,
    /// pool.
    Square,
    /// local.
    Cross,
}

impl Marker {
    fn of(sampling: SchemeName) -> Self {
        match sampling.0.and_then(|n| n.parse::<roam::Scheme>().ok()) {
            Some(roam::Scheme::Preloc) => Self::Triangle,
            Some(roam::Scheme::Pool { .. }) => Self::Square,
            Some(roam::Scheme::Local { .. }) => Self::Cross,
            _ => Self::Circle,
        }
    }
}

/// Draws the quality figures ([`QUALITY_FIGURES`]) of the workloads that reported a quality
/// metric (kge, w2v, ctr); nothing when there are none.
fn draw_quality(summary: &Summary, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let groups: Vec<(App, Profile, u32)> = summary
        .groups()
        .into_iter()
        .filter(|&(app, _, _)| app.scored() && summary.quality_metric(app).is_some())
        .collect();
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let modes = summary.modes();
    let panels = |x: &dyn Fn(CellKey, &Cell) -> Option<Stat>| {
        panels(&groups, |app, profile, w| {
            configurations(summary, (app, profile, w), &modes)
                .into_iter()
                .filter_map(|(key, color)| {
                    let points = node_points(summary, key.mode, |nodes| {
                        let key = CellKey { nodes, ..key };
                        let cell = summary.cell(key)?;
                        Some((x(key, cell)?, cell.quality?))
                    });
                    (!points.is_empty()).then(|| Cloud {
                        label: summary.label(key),
                        color,
                        sampling: key.sampling,
                        points,
                    })
                })
                .collect()
        })
    };
    let y_label = |app| summary.quality_metric(app).map_or("quality", metric_label);
    let columns = groups_columns(&groups);
    let mut written = Vec::new();
    let [cpu_name, time_name] = QUALITY_FIGURES;
    let path = dir.join(cpu_name);
    draw_clouds(
        &path,
        "Quality after the last epoch vs CPU overhead ratio (CPU s per epoch, all nodes / \
         single's); labels: nodes",
        &panels(&|k, _| summary.overhead(k)),
        columns,
        &y_label,
        "CPU overhead ratio",
        &[1.0, CPU_OVERHEAD_AIM],
    )
    .with_context(|| format!("drawing {}", path.display()))?;
    written.push(path);
    let path = dir.join(time_name);
    draw_clouds(
        &path,
        "Quality after the last epoch vs epoch time (s); labels: nodes",
        &panels(&|_, c| c.epoch_seconds),
        columns,
        &y_label,
        "seconds per epoch",
        &[],
    )
    .with_context(|| format!("drawing {}", path.display()))?;
    written.push(path);
    Ok(written)
}

/// Draws one quality figure: per panel, a log x axis (`x_label`, dashed lines at
/// `x_references`), the quality on a linear y axis (labelled `y_label` of the panel's
/// workload), each configuration's points joined in node order with min–max bars both ways and
/// the node count beside each point, and the legend to the right of the plot. The marker tells
/// the scheme's family ([`Marker`]).
fn draw_clouds<'s>(
    path: &Path,
    title: &str,
    panels: &[Panel<Cloud>],
    columns: usize,
    y_label: &dyn Fn(App) -> &'s str,
    x_label: &str,
    x_references: &[f64],
) -> anyhow::Result<()> {
    let rows = panels.len().div_ceil(columns);
    let (pw, ph, legend_w) = (600u32, 420u32, 170u32);
    let width = (pw + legend_w) * columns as u32;
    let height = ph * rows as u32 + 40;
    let (root, areas) = canvas(path, (width, height), title, (rows, columns))?;
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let (plot, legend) = area.split_horizontally(pw);
        let xs: Vec<f64> = panel
            .series
            .iter()
            .flat_map(|c| c.points.iter().flat_map(|(_, (x, _))| [x.min, x.max]))
            .chain(x_references.iter().copied())
            .filter(|v| *v > 0.0)
            .map(f64::log10)
            .collect();
        let ys: Vec<f64> = panel
            .series
            .iter()
            .flat_map(|c| c.points.iter().flat_map(|(_, (_, y))| [y.min, y.max]))
            .collect();
        let (x0, x1) = fit(&xs, 0.05);
        let (y0, y1) = fit(&ys, 1e-3);
        let mut chart = ChartBuilder::on(&plot)
            .caption(&panel.title, (FAMILY, 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(58)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .x_labels(6)
            .y_labels(6)
            .y_desc(y_label(panel.app))
            .x_label_formatter(&|v| log_label(*v))
            .y_label_formatter(&|v| format!("{}", (v * 1000.0).round() / 1000.0))
            .light_line_style(WHITE)
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 12))
            .draw()
            .map_err(plot_err)?;
        for &r in x_references {
            let r = r.log10();
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(r, y0), (r, y1)],
                    5,
                    4,
                    BLACK.mix(0.5).stroke_width(1),
                ))
                .map_err(plot_err)?;
        }
        for c in &panel.series {
            let color = c.color;
            let pts: Vec<(f64, f64)> = c
                .points
                .iter()
                .filter(|(_, (x, _))| x.median > 0.0)
                .map(|(_, (x, y))| (x.median.log10(), y.median))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))
                .map_err(plot_err)?;
            let style = color.filled();
            match Marker::of(c.sampling) {
                Marker::Circle => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, style))),
                Marker::Triangle => {
                    chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 6, style)))
                }
                Marker::Square => chart.draw_series(
                    pts.iter()
                        .map(|&p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], style)),
                ),
                Marker::Cross => {
                    chart.draw_series(pts.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2))))
                }
            }
            .map_err(plot_err)?;
            for (n, (x, y)) in &c.points {
                if x.min <= 0.0 || x.median <= 0.0 {
                    continue;
                }
                let (xm, ym) = (x.median.log10(), y.median);
                chart
                    .draw_series([
                        PathElement::new(vec![(x.min.log10(), ym), (x.max.log10(), ym)], color),
                        PathElement::new(vec![(xm, y.min), (xm, y.max)], color),
                    ])
                    .map_err(plot_err)?;
                // The node count just above and right of the point.
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((xm, ym))
                            + Text::new(
                                format!("{n}"),
                                (5, -14),
                                (FAMILY, 11).into_font().color(&color),
                            ),
                    ))
                    .map_err(plot_err)?;
            }
        }
        // The legend: the marker and the configuration's label per line.
        for (i, c) in panel.series.iter().enumerate() {
            let y = 40 + 15 * i as i32;
            let (at, style) = ((8, y), c.color.filled());
            match Marker::of(c.sampling) {
                Marker::Circle => legend.draw(&Circle::new(at, 4, style)),
                Marker::Triangle => legend.draw(&TriangleMarker::new(at, 6, style)),
                Marker::Square => legend.draw(&Rectangle::new([(4, y - 4), (12, y + 4)], style)),
                Marker::Cross => legend.draw(&Cross::new(at, 5, c.color.stroke_width(2))),
            }
            .map_err(plot_err)?;
            legend
                .draw(&Text::new(
                    c.label.clone(),
                    (18, y - 6),
                    (FAMILY, 11).into_font().color(&BLACK),
                ))
                .map_err(plot_err)?;
        }
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Columns of the panel grid: the profiles present.
fn groups_columns(groups: &[(App, Profile, u32)]) -> usize {
    let mut profiles: Vec<(Profile, u32)> = groups.iter().map(|g| (g.1, g.2)).collect();
    profiles.sort();
    profiles.dedup();
    profiles.len().max(1)
}

/// One panel per group, in row-major (workload, then profile) order; a missing combination
/// leaves an empty panel so that columns stay aligned.
fn panels<S>(
    groups: &[(App, Profile, u32)],
    series: impl Fn(App, Profile, u32) -> Vec<S>,
) -> Vec<Panel<S>> {
    let mut columns: Vec<(Profile, u32)> = groups.iter().map(|g| (g.1, g.2)).collect();
    columns.sort();
    columns.dedup();
    let mut apps: Vec<App> = groups.iter().map(|g| g.0).collect();
    apps.sort();
    apps.dedup();
    let mut out = Vec::new();
    for app in apps {
        for &(profile, w) in &columns {
            let present = groups.contains(&(app, profile, w));
            out.push(Panel {
                app,
                title: format!("{} / {} / {w} w/node", app.name(), profile.name()),
                series: if present {
                    series(app, profile, w)
                } else {
                    Vec::new()
                },
            });
        }
    }
    out
}

/// The points of `mode` at each node count ([`Summary::node_counts_of`]) that has a value.
fn node_points<T>(
    summary: &Summary,
    mode: Mode,
    value: impl Fn(u32) -> Option<T>,
) -> Vec<(u32, T)> {
    summary
        .node_counts_of(mode)
        .into_iter()
        .filter_map(|n| value(n).map(|s| (n, s)))
        .collect()
}

/// A tick label for a value shown on a log axis (`v` is its log10): two significant digits.
pub(crate) fn log_label(v: f64) -> String {
    let x = 10f64.powf(v);
    if x >= 1e4 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 0.001 {
        let digits = (1 - x.log10().floor() as i32).max(0) as usize;
        format!("{x:.digits$}")
    } else {
        format!("{x:.0e}")
    }
}

/// The range of `values` widened by 8 % of its span (at least `min_pad`) each way; (0, 1) when
/// there are none.
pub(crate) fn fit(values: &[f64], min_pad: f64) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 1.0);
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.08).max(min_pad);
    (lo - pad, hi + pad)
}

/// A drawing area of a PNG file.
pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A plotters error as an [`anyhow::Error`].
pub(crate) fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{e}")
}

/// Draws `chart`'s legend at `position` in the style every figure shares (suite figures,
/// `roam plot` reports and allocation traces): a white box at 85 % opacity that lets the grid
/// show through, a grey border, and labels in [`FAMILY`] at `size` px.
pub(crate) fn draw_legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
    size: u32,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FAMILY, size))
        .position(position)
        .draw()
        .map_err(plot_err)
}

/// The drawing areas of a white `width` × `height` image at `path` with `title` on top: the
/// whole (to present when drawn) and the panels below the title, `rows` × `columns`. The title
/// is 20 px, smaller if it would not fit the width (a monospace glyph is about 0.6 of the font
/// size wide).
pub(crate) fn canvas<'a>(
    path: &'a Path,
    (width, height): (u32, u32),
    title: &str,
    (rows, columns): (usize, usize),
) -> anyhow::Result<(Area<'a>, Vec<Area<'a>>)> {
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (head, body) = root.split_vertically(40);
    let title_size =
        (f64::from(width - 20) / (0.6 * title.chars().count() as f64)).clamp(11.0, 20.0);
    head.titled(title, (FAMILY, title_size)).map_err(plot_err)?;
    let areas = body.split_evenly((rows, columns));
    Ok((root, areas))
}

/// Draws one figure.
fn draw(
    path: &Path,
    title: &str,
    panels: &[Panel<Series>],
    columns: usize,
    y: YAxis,
) -> anyhow::Result<()> {
    let rows = panels.len().div_ceil(columns);
    let (pw, ph) = (460u32, 330u32);
    let width = pw * columns as u32;
    let height = ph * rows as u32 + 40;
    let (root, areas) = canvas(path, (width, height), title, (rows, columns))?;
    let max_nodes = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
        .max()
        .unwrap_or(1)
        .max(2);
    let xmax = f64::from(max_nodes).log2();
    let x_labels = xmax.round() as usize + 1;
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let tf = |v: f64| if y.log { v.log10() } else { v };
        let values: Vec<f64> = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|(_, st)| [st.min, st.max]))
            .chain(y.references.iter().copied())
            .filter(|v| !y.log || *v > 0.0)
            .map(tf)
            .collect();
        let (lo, hi) = y
            .fixed
            .unwrap_or_else(|| fit(&values, if y.log { 0.05 } else { 1e-3 }));
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, (FAMILY, 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(58)
            .build_cartesian_2d(-0.25..xmax + 0.25, lo..hi)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("nodes")
            .x_labels(x_labels)
            .y_labels(6)
            .y_desc(y.label)
            .x_label_formatter(&|v| format!("{}", 2f64.powf(*v).round()))
            .y_label_formatter(&|v| {
                if y.log {
                    log_label(*v)
                } else {
                    format!("{}", (v * 1000.0).round() / 1000.0)
                }
            })
            // Only the labelled grid lines: the minor ones would triple the PNG's size.
            .light_line_style(WHITE)
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 12))
            .draw()
            .map_err(plot_err)?;
        for &r in y.references {
            let r = tf(r);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(-0.25, r), (xmax + 0.25, r)],
                    5,
                    4,
                    BLACK.mix(0.5).stroke_width(1),
                ))
                .map_err(plot_err)?;
        }
        for s in &panel.series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(_, st)| !y.log || st.median > 0.0)
                .map(|(n, st)| (f64::from(*n).log2(), tf(st.median)))
                .collect();
            let color = s.color;
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(s.label.clone())
                .legend(move |(x, yy)| {
                    PathElement::new(vec![(x, yy), (x + 18, yy)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(plot_err)?;
            chart
                .draw_series(
                    s.points
                        .iter()
                        .filter(|(_, st)| !y.log || st.min > 0.0)
                        .map(|(n, st)| {
                            let x = f64::from(*n).log2();
                            PathElement::new(vec![(x, tf(st.min)), (x, tf(st.max))], color)
                        }),
                )
                .map_err(plot_err)?;
        }
        if !panel.series.is_empty() {
            draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 11)?;
        }
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_labels_have_two_significant_digits() {
        assert_eq!(log_label(1.0), "10");
        assert_eq!(log_label(0.2), "1.6");
        assert_eq!(log_label(-1.3), "0.050");
        assert_eq!(log_label(4.5), "32k");
    }
}
