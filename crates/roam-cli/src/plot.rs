//! `roam plot REPORT.json... -o FILE.png` and `roam train ... --plot FILE.png`: a training
//! run's curves. Three panels side by side: loss per epoch, the app's quality metric per
//! evaluated epoch (test RMSE for mf, MRR for kge, the headline metric for w2v) and seconds per
//! epoch (where the modes differ: their arithmetic is the same by design); several
//! reports (the same job in several modes, say) are overlaid, a colour each, with a legend.
//! Reports are read with [`roam_apps::output::read_report`], so a `--report` file, saved
//! `--json` output and the output of older binaries all work. Fonts, canvas and error mapping
//! come from the suite's figures ([`crate::suite::plots`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use plotters::prelude::*;
use roam_apps::output::{OutputArgs, lower_is_better, quality_metric, read_report};
use serde_json::Value;

use crate::suite::plots::{FAMILY, FONT, canvas, draw_legend, fit, log_label, plot_err};

/// `roam plot REPORT.json... -o FILE.png [--title TEXT]` or `roam plot --trace TRACE -o
/// FILE.png`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PlotArgs {
    /// Reports of `roam train ... --report FILE` (or saved `--json` output); one line each.
    #[arg(required_unless_present = "trace", value_name = "REPORT.json")]
    reports: Vec<PathBuf>,
    /// Draw instead the allocation trace of `roam train ... --trace-allocation TRACE`: keys ×
    /// time coloured by holder, and each node's local share of accesses over time.
    #[arg(long, value_name = "TRACE", conflicts_with = "reports")]
    trace: Option<PathBuf>,
    /// The PNG to write.
    #[arg(short, long, value_name = "FILE.png")]
    output: PathBuf,
    /// The figure's title (default: the app and dataset).
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
}

/// One run to draw.
struct Run {
    label: String,
    /// (epoch, loss) for every epoch.
    loss: Vec<(f64, f64)>,
    /// (epoch, quality) for the evaluated epochs.
    quality: Vec<(f64, f64)>,
    /// (epoch, seconds) for every epoch (training only, without evaluation).
    seconds: Vec<(f64, f64)>,
    metric: String,
}

/// The figure's size in pixels.
const WIDTH: u32 = 1500;
const HEIGHT: u32 = 480;

/// Line colours (matplotlib's tab10), one per report in order.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// `roam plot`.
pub(crate) fn run(args: &PlotArgs) -> anyhow::Result<i32> {
    if let Some(trace) = &args.trace {
        return crate::trace_plot::run(trace, &args.output, args.title.as_deref());
    }
    let reports = args
        .reports
        .iter()
        .map(|p| read_report(p).map(|r| (p.as_path(), r)))
        .collect::<Result<Vec<_>, _>>()?;
    draw_reports(&reports, &args.output, args.title.as_deref())?;
    println!("{}", args.output.display());
    Ok(0)
}

/// After `roam train`: draws `--plot` from rank 0's report (other ranks have none).
pub(crate) fn after_training(output: &OutputArgs, report: Option<Value>) -> anyhow::Result<i32> {
    if let (Some(path), Some(report)) = (&output.plot, report) {
        draw_reports(&[(path.as_path(), report)], path, None)?;
        eprintln!("plot: {}", path.display());
    }
    Ok(0)
}

/// Draws `reports` (each with the file it came from, for labels) into the PNG `out`.
fn draw_reports(reports: &[(&Path, Value)], out: &Path, title: Option<&str>) -> anyhow::Result<()> {
    let runs = runs(reports);
    let title = title.map_or_else(|| default_title(reports), str::to_string);
    plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled font does not parse"))?;
    draw(out, &title, &runs).with_context(|| format!("drawing {}", out.display()))
}

/// The runs of `reports`, labelled `app mode nodes×workers` (plus the file name when two
/// labels would be equal).
fn runs(reports: &[(&Path, Value)]) -> Vec<Run> {
    let labels: Vec<String> = reports
        .iter()
        .map(|(_, r)| {
            format!(
                "{} {} {}x{}",
                r["app"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                r["nodes"],
                r["workers_per_node"]
            )
        })
        .collect();
    reports
        .iter()
        .zip(&labels)
        .map(|((path, report), label)| {
            let twice = labels.iter().filter(|l| *l == label).count() > 1;
            let label = if twice {
                let file = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                format!("{label} ({file})")
            } else {
                label.clone()
            };
            let metric = quality_metric(report);
            let epochs = report["epochs"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let series = |field: &str| -> Vec<(f64, f64)> {
                epochs
                    .iter()
                    .filter_map(|e| Some((e["epoch"].as_f64()?, e.get(field)?.as_f64()?)))
                    .filter(|(_, v)| v.is_finite())
                    .collect()
            };
            Run {
                label,
                loss: series("loss"),
                quality: series(&metric),
                seconds: series("seconds"),
                metric,
            }
        })
        .collect()
}

/// `app · dataset` when all reports share them, else `training runs`.
fn default_title(reports: &[(&Path, Value)]) -> String {
    let first = &reports[0].1;
    let same = |k: &str| reports.iter().all(|(_, r)| r[k] == first[k]);
    if same("app") && same("dataset") {
        let dataset = first["dataset"].as_str().unwrap_or("?");
        let dataset = if dataset.chars().count() > 70 {
            format!("{}...", dataset.chars().take(67).collect::<String>())
        } else {
            dataset.to_string()
        };
        format!("{} · {dataset}", first["app"].as_str().unwrap_or("?"))
    } else {
        "training runs".to_string()
    }
}

/// One panel's y axis: log10 when every value is positive and they span more than 20×.
struct Axis {
    log: bool,
    range: (f64, f64),
}

impl Axis {
    fn of(values: impl Iterator<Item = f64> + Clone) -> Self {
        let lo = values.clone().fold(f64::INFINITY, f64::min);
        let hi = values.clone().fold(f64::NEG_INFINITY, f64::max);
        let log = lo > 0.0 && hi / lo > 20.0;
        let tf: Vec<f64> = values.map(|v| if log { v.log10() } else { v }).collect();
        let span = tf.iter().copied().fold(0f64, |m, v| m.max(v.abs()));
        Self {
            log,
            range: fit(&tf, if log { 0.05 } else { (span * 1e-3).max(1e-9) }),
        }
    }

    fn y(&self, v: f64) -> f64 {
        if self.log { v.log10() } else { v }
    }

    fn label(&self, v: f64) -> String {
        if self.log {
            log_label(v)
        } else {
            // Ticks are round numbers: 0.06 and 1.6e5, not 0.06000 and 1.600e5.
            let n = roam_apps::output::number(v);
            let (mantissa, exponent) = n
                .split_once('e')
                .map_or((n.as_str(), None), |(m, e)| (m, Some(e)));
            let mantissa = if mantissa.contains('.') {
                mantissa.trim_end_matches('0').trim_end_matches('.')
            } else {
                mantissa
            };
            let short = match exponent {
                Some(e) => format!("{mantissa}e{e}"),
                None => mantissa.to_string(),
            };
            // Ticks of a narrow axis (a quality of 1.0106 to 1.0114) need more digits than a
            // value's usual four significant ones, or two ticks print the same label; ticks
            // are about a sixth of the axis apart, so one digit below that step tells them
            // apart. Plain decimals only where the short form has no exponent and |v| < 1e4.
            let step = (self.range.1 - self.range.0) / 6.0;
            if exponent.is_some() || !(step > 0.0 && step.is_finite()) || v.abs() >= 1e4 {
                return short;
            }
            let decimals = (1.0 - step.log10().floor()).clamp(0.0, 9.0) as usize;
            let fixed = format!("{v:.decimals$}");
            let fixed = if fixed.contains('.') {
                fixed.trim_end_matches('0').trim_end_matches('.')
            } else {
                &fixed
            };
            if fixed.len() > short.len() {
                fixed.to_string()
            } else {
                short
            }
        }
    }
}

/// Draws the loss and quality panels of `runs`.
fn draw(path: &Path, title: &str, runs: &[Run]) -> anyhow::Result<()> {
    let (root, areas) = canvas(path, (WIDTH, HEIGHT), title, (1, 3))?;
    let metrics: Vec<&str> = runs.iter().map(|r| r.metric.as_str()).collect();
    let metric = if metrics.iter().all(|m| *m == metrics[0]) {
        metrics[0].to_string()
    } else {
        "quality (each run's metric)".to_string()
    };
    let lower = lower_is_better(&metric);
    let panels = [
        (
            "loss per epoch".to_string(),
            "loss",
            runs.iter().map(|r| &r.loss).collect::<Vec<_>>(),
        ),
        (
            format!(
                "{metric} per evaluated epoch ({} is better)",
                if lower { "lower" } else { "higher" }
            ),
            metric.as_str(),
            runs.iter().map(|r| &r.quality).collect(),
        ),
        (
            "seconds per epoch (training)".to_string(),
            "seconds",
            runs.iter().map(|r| &r.seconds).collect(),
        ),
    ];
    let max_epoch = runs
        .iter()
        .flat_map(|r| r.loss.iter().chain(&r.quality).map(|p| p.0))
        .fold(1f64, f64::max);
    for (p, ((caption, y_desc, series), area)) in panels.iter().zip(areas.iter()).enumerate() {
        let axis = Axis::of(series.iter().flat_map(|s| s.iter().map(|p| p.1)));
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FAMILY, 15))
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5..max_epoch + 0.5, axis.range.0..axis.range.1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc(*y_desc)
            .x_labels((max_epoch as usize).min(10))
            .y_labels(6)
            .x_label_formatter(&|v| format!("{}", v.round()))
            .y_label_formatter(&|v| axis.label(*v))
            // Only the labelled grid lines (the minor ones add clutter and bytes).
            .light_line_style(WHITE)
            .label_style((FAMILY, 12))
            .axis_desc_style((FAMILY, 12))
            .draw()
            .map_err(plot_err)?;
        for (i, (run, points)) in runs.iter().zip(series).enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| !axis.log || p.1 > 0.0)
                .map(|&(x, v)| (x, axis.y(v)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(run.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(plot_err)?;
        }
        if p > 0 {
            // One legend, in the loss panel, whose falling curves leave its upper right free.
            continue;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight, 12)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A narrow axis (e.g. test RMSE 1.0105 to 1.0115 over epochs) gets one label per tick;
    /// four significant digits printed 1.011 for two of them.
    #[test]
    fn ticks_of_a_narrow_axis_have_distinct_labels() {
        let axis = Axis::of([1.0105, 1.0109, 1.0115].into_iter());
        let ticks = [1.0106, 1.0108, 1.0110, 1.0112, 1.0114];
        let labels: Vec<String> = ticks.iter().map(|&t| axis.label(t)).collect();
        let mut distinct = labels.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), ticks.len(), "{labels:?}");
        let axis = Axis::of([0.25301, 0.25319].into_iter());
        let labels: Vec<String> = [0.25303, 0.25306, 0.25309]
            .iter()
            .map(|&t| axis.label(t))
            .collect();
        assert!(
            labels[0] != labels[1] && labels[1] != labels[2],
            "{labels:?}"
        );
        // A wide axis keeps the short labels.
        let wide = Axis::of([0.0, 3.0].into_iter());
        assert_eq!(wide.label(1.5), "1.5");
        assert_eq!(wide.label(2.0), "2");
    }

    #[test]
    fn runs_take_loss_every_epoch_and_quality_where_evaluated() {
        let a = json!({"app": "mf", "mode": "lapse", "nodes": 2, "workers_per_node": 2,
            "epochs": [{"epoch": 1, "loss": 9.0}, {"epoch": 2, "loss": 8.0, "test_rmse": 1.1}]});
        let b = a.clone();
        let runs = runs(&[(Path::new("x/a.json"), a), (Path::new("y/b.json"), b)]);
        assert_eq!(runs[0].loss, vec![(1.0, 9.0), (2.0, 8.0)]);
        assert_eq!(runs[0].quality, vec![(2.0, 1.1)]);
        assert_eq!(runs[0].metric, "test_rmse");
        // Equal labels are told apart by their files.
        assert_eq!(runs[0].label, "mf lapse 2x2 (a.json)");
        assert_eq!(runs[1].label, "mf lapse 2x2 (b.json)");
    }

    #[test]
    fn axes_go_logarithmic_only_for_wide_positive_ranges() {
        assert!(Axis::of([1e5, 1e3].into_iter()).log);
        assert!(!Axis::of([0.9, 1.2].into_iter()).log);
        assert!(!Axis::of([-1.0, 100.0].into_iter()).log);
        let linear = Axis::of([0.0, 1.0].into_iter());
        assert_eq!(
            [0.06, 160000.0, 80000.0, 0.0].map(|v| linear.label(v)),
            ["0.06", "1.6e5", "80000", "0"]
        );
    }
}
