//! `roam bench timeline`: the load balancer's timeline figure. It reads the JSON files that
//! `scripts/balancer-bench.py --timeline FILE.json` writes (every run's epoch end times and
//! lengths, and the balancer's decisions) and draws one PNG with a panel per file, stacked
//! vertically: seconds per epoch against seconds since the training started, a line per
//! configuration (its repetition with the median total time), the balancer's decisions of the
//! `on` run as markers on its line, and the straggler's `--slow-node` window shaded. Fonts,
//! canvas and error mapping come from the suite's figures ([`crate::suite::plots`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use plotters::prelude::*;
use serde::Deserialize;

use crate::suite::plots::{Area, FAMILY, FONT, canvas, plot_err};

/// `roam bench timeline IN.json [IN2.json ...] -o OUT.png [--title TEXT]`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct TimelineArgs {
    /// Files written by `scripts/balancer-bench.py --timeline FILE.json`; one panel each.
    #[arg(required = true, value_name = "IN.json")]
    inputs: Vec<PathBuf>,
    /// The PNG to write.
    #[arg(short, long, value_name = "OUT.png")]
    output: PathBuf,
    /// The figure's title.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
}

/// One timeline file (the fields the figure uses; others are ignored).
#[derive(Deserialize)]
struct Timeline {
    #[serde(default)]
    job: Vec<String>,
    slow: Option<String>,
    scope: Option<String>,
    nodes: Option<u32>,
    profile: Option<String>,
    /// Configuration (`none`, `off`, `on`, `none-off`) → its repetitions.
    runs: BTreeMap<String, Vec<Run>>,
}

/// One run of a configuration.
#[derive(Deserialize)]
struct Run {
    epochs: Vec<Epoch>,
    #[serde(default)]
    decisions: Vec<Decision>,
}

/// One epoch: when it ended (seconds since the training started) and how long it took.
#[derive(Deserialize)]
struct Epoch {
    end_s: f64,
    seconds: f64,
}

/// One balancer decision: when (seconds since the node started) and what.
#[derive(Deserialize)]
struct Decision {
    at_s: f64,
    kind: String,
}

/// The configurations drawn, in legend order; `none-off` is dashed.
const CONFIGS: [&str; 4] = ["none", "none-off", "off", "on"];

/// A configuration's legend label and colour.
fn style(key: &str) -> (&'static str, RGBColor) {
    match key {
        "none" => ("no straggler", RGBColor(31, 119, 180)),
        "none-off" => ("no straggler, balancer off", RGBColor(120, 120, 120)),
        "off" => ("straggler, balancer off", RGBColor(214, 39, 40)),
        _ => ("straggler, balancer on", RGBColor(44, 160, 44)),
    }
}

/// The decision kinds marked, in legend order.
const KINDS: [&str; 4] = ["Shrink", "Probe", "Keep", "Undo"];

/// The default title.
const TITLE: &str = "Load balancer timeline: seconds per epoch over the training";

/// The caption under the panels.
const CAPTION: [&str; 3] = [
    "Each line: the configuration's repetition with the median total time (the lower one of \
     an even count); a point per epoch, at its end.",
    "Markers: the balancer's decisions in the balancer-on run. Shading: the --slow-node window. \
     Both are timed from the nodes' start,",
    "the x axis from the training's start (after loading), so markers and shading are \
     approximate: drawn early by the loading time.",
];

/// Reads every input and draws the figure; returns the exit code.
pub(crate) fn run(args: &TimelineArgs) -> anyhow::Result<i32> {
    let timelines: Vec<Timeline> = args
        .inputs
        .iter()
        .map(|p| load(p))
        .collect::<Result<_, _>>()?;
    plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled font does not parse"))?;
    let title = args.title.as_deref().unwrap_or(TITLE);
    let out = &args.output;
    draw(out, title, &timelines).with_context(|| format!("drawing {}", out.display()))?;
    println!("{}", out.display());
    Ok(0)
}

/// Reads and checks one timeline file; errors name the file.
fn load(path: &Path) -> anyhow::Result<Timeline> {
    let name = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    let timeline: Timeline = serde_json::from_str(&text)
        .with_context(|| format!("{name}: not a timeline of scripts/balancer-bench.py"))?;
    if !CONFIGS
        .iter()
        .any(|key| representative(&timeline, key).is_some())
    {
        bail!("{name}: no run of none, off, on or none-off has epochs");
    }
    Ok(timeline)
}

/// The run drawn for configuration `key`: the repetition with the median total time (the
/// lower of the two middle ones of an even count); `None` without a run that has epochs.
fn representative<'t>(timeline: &'t Timeline, key: &str) -> Option<&'t Run> {
    let total = |r: &Run| r.epochs.last().map_or(0.0, |e| e.end_s);
    let mut runs: Vec<&Run> = timeline
        .runs
        .get(key)?
        .iter()
        .filter(|r| !r.epochs.is_empty())
        .collect();
    runs.sort_by(|a, b| total(a).total_cmp(&total(b)));
    runs.get(runs.len().saturating_sub(1) / 2).copied()
}

/// A `--slow-node RANK:FACTOR[@START[-END]]` specification.
#[derive(Debug, PartialEq)]
struct Slow {
    rank: u32,
    factor: String,
    /// Start and end (open without) in seconds after the nodes start.
    window: Option<(f64, Option<f64>)>,
}

/// Parses a `--slow-node` specification; `None` if it is not one.
fn parse_slow(spec: &str) -> Option<Slow> {
    let (head, window) = spec
        .split_once('@')
        .map_or((spec, None), |(h, w)| (h, Some(w)));
    let (rank, factor) = head.split_once(':')?;
    factor.parse::<f64>().ok()?;
    let window = match window.map(|w| w.split_once('-').map_or((w, None), |(s, e)| (s, Some(e)))) {
        None => None,
        Some((start, end)) => Some((start.parse().ok()?, end.map(str::parse).transpose().ok()?)),
    };
    let (rank, factor) = (rank.parse().ok()?, factor.into());
    Some(Slow {
        rank,
        factor,
        window,
    })
}

/// `text` cut to `max` characters by an ellipsis in the middle (keeping its start and end:
/// the job's mode and its epochs) when longer.
fn shorten(text: &str, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return text.to_string();
    }
    let head = (max - 1) * 2 / 3;
    let tail = max - 1 - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// The y of the polyline `points` at `x`, clamped to its ends.
fn on_line(points: &[(f64, f64)], x: f64) -> f64 {
    let Some(i) = points.iter().position(|p| p.0 >= x) else {
        return points.last().map_or(0.0, |p| p.1);
    };
    if i == 0 {
        return points[0].1;
    }
    let ((x0, y0), (x1, y1)) = (points[i - 1], points[i]);
    if x1 > x0 {
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    } else {
        y1
    }
}

/// Draws `kind`'s marker at pixel `at` (of a chart's element or the legend).
fn marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    kind: &str,
    at: (i32, i32),
) -> anyhow::Result<()> {
    let (x, y) = at;
    match kind {
        "Shrink" => area.draw(&TriangleMarker::new(at, 6, RGBColor(230, 110, 0).filled())),
        "Probe" => area.draw(&Rectangle::new(
            [(x - 4, y - 4), (x + 4, y + 4)],
            RGBColor(128, 60, 200).filled(),
        )),
        "Undo" => area.draw(&Cross::new(at, 5, BLACK.stroke_width(2))),
        _ => area.draw(&Circle::new(at, 4, BLACK.stroke_width(1))),
    }
    .map_err(plot_err)
}

/// Draws the whole figure into `path`.
fn draw(path: &Path, title: &str, timelines: &[Timeline]) -> anyhow::Result<()> {
    let (pw, legend_w, ph, foot) = (840u32, 310u32, 400u32, 64u32);
    let height = 40 + ph * timelines.len() as u32 + foot;
    let (root, areas) = canvas(path, (pw + legend_w, height), title, (1, 1))?;
    let (body, footer) = areas[0].split_vertically(ph * timelines.len() as u32);
    let panels = body.split_evenly((timelines.len(), 1));
    for (timeline, area) in timelines.iter().zip(panels) {
        let (plot, legend) = area.split_horizontally(pw);
        panel(timeline, &plot, &legend)?;
    }
    let font = (FAMILY, 12).into_font().color(&BLACK.mix(0.75));
    for (i, line) in CAPTION.iter().enumerate() {
        let text = Text::new(*line, (12, 8 + 17 * i as i32), font.clone());
        footer.draw(&text).map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Draws one file's panel: the chart into `plot`, its legend and setup into `legend`.
fn panel(timeline: &Timeline, plot: &Area<'_>, legend: &Area<'_>) -> anyhow::Result<()> {
    let lines: Vec<Line<'_>> = CONFIGS
        .iter()
        .filter_map(|&key| {
            let run = representative(timeline, key)?;
            let points = run.epochs.iter().map(|e| (e.end_s, e.seconds)).collect();
            Some(Line { key, run, points })
        })
        .collect();
    let decisions: Vec<&Decision> = lines
        .iter()
        .filter(|l| l.key == "on")
        .flat_map(|l| l.run.decisions.iter())
        .filter(|d| d.at_s.is_finite())
        .collect();
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let x_max = xs
        .chain(decisions.iter().map(|d| d.at_s))
        .fold(1.0, f64::max)
        * 1.03;
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let y_max = ys.fold(0.1, f64::max) * 1.22;
    let mut chart = ChartBuilder::on(plot)
        .caption(shorten(&timeline.job.join(" "), 80), (FAMILY, 14))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the training started")
        .y_desc("seconds per epoch")
        .x_labels(12)
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.1}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.08))
        .label_style((FAMILY, 12))
        .axis_desc_style((FAMILY, 12))
        .draw()
        .map_err(plot_err)?;
    let slow = timeline.slow.as_deref().and_then(parse_slow);
    if let Some((Slow { rank, factor, .. }, (start, end))) =
        slow.as_ref().and_then(|s| Some((s, s.window?)))
    {
        let (x0, x1) = (start.max(0.0), end.unwrap_or(x_max).min(x_max));
        if x0 < x1 {
            let shade = RGBColor(255, 190, 60).mix(0.22).filled();
            let font = (FAMILY, 12).into_font().color(&RGBColor(150, 90, 0));
            let label = Text::new(format!("node {rank} slowed {factor}×"), (5, 5), font);
            let span = Rectangle::new([(x0, 0.0), (x1, y_max)], shade);
            chart.draw_series([span]).map_err(plot_err)?;
            let label = EmptyElement::at((x0, y_max)) + label;
            chart.draw_series([label]).map_err(plot_err)?;
        }
    }
    for Line { key, points, .. } in &lines {
        let color = style(key).1;
        if *key == "none-off" {
            let line = DashedLineSeries::new(points.clone(), 8, 5, color.stroke_width(2));
            chart.draw_series(line).map_err(plot_err)?;
        } else {
            let line = LineSeries::new(points.clone(), color.stroke_width(2));
            chart.draw_series(line).map_err(plot_err)?;
        }
        let dots = points.iter().map(|&p| Circle::new(p, 3, color.filled()));
        chart.draw_series(dots).map_err(plot_err)?;
    }
    if let Some(Line { points, .. }) = lines.iter().find(|l| l.key == "on") {
        // Pixels relative to the plotting area, as its coordinate-free view draws them.
        let area = chart.plotting_area();
        let pixels = area.strip_coord_spec();
        let (bx, by) = pixels.get_base_pixel();
        for d in &decisions {
            let (x, y) = area.map_coordinate(&(d.at_s, on_line(points, d.at_s)));
            marker(&pixels, &d.kind, (x - bx, y - by))?;
        }
    }
    draw_legend(timeline, slow.as_ref(), &lines, &decisions, legend)
}

/// A configuration drawn: its key, the run and its (end, seconds) points.
struct Line<'t> {
    key: &'static str,
    run: &'t Run,
    points: Vec<(f64, f64)>,
}

/// The panel's legend: the configurations drawn, the decision kinds present, then the setup.
fn draw_legend(
    timeline: &Timeline,
    slow: Option<&Slow>,
    lines: &[Line<'_>],
    decisions: &[&Decision],
    legend: &Area<'_>,
) -> anyhow::Result<()> {
    let mut y = 46;
    let text = |s: String, x: i32, y: i32, shade: f64| {
        let font = (FAMILY, 12).into_font().color(&BLACK.mix(shade));
        legend
            .draw(&Text::new(s, (x, y - 7), font))
            .map_err(plot_err)
    };
    for Line { key, .. } in lines {
        let (label, color) = style(key);
        let dashes: &[(i32, i32)] = if *key == "none-off" {
            &[(2, 10), (16, 26)]
        } else {
            &[(2, 26)]
        };
        for &(a, b) in dashes {
            let dash = PathElement::new(vec![(a, y), (b, y)], color.stroke_width(2));
            legend.draw(&dash).map_err(plot_err)?;
        }
        let reps = timeline.runs.get(*key).map_or(0, Vec::len);
        let reps = if reps == 1 {
            "1 rep".into()
        } else {
            format!("{reps} reps")
        };
        text(format!("{label} ({reps})"), 34, y, 1.0)?;
        y += 20;
    }
    y += 6;
    for kind in KINDS {
        if decisions.iter().any(|d| d.kind == kind) {
            marker(legend, kind, (14, y))?;
            text(format!("balancer: {kind}"), 34, y, 1.0)?;
            y += 20;
        }
    }
    y += 10;
    let nodes = timeline.nodes.map_or("?".into(), |n| n.to_string());
    let profile = timeline.profile.as_deref().unwrap_or("loopback");
    let mut setup = vec![format!("{nodes} nodes, {profile}")];
    if let Some(spec) = &timeline.slow {
        setup.push(format!("--slow-node {spec}"));
        setup.extend(timeline.scope.as_ref().map(|s| format!("--slow-scope {s}")));
        if let Some(Slow {
            rank,
            factor,
            window: None,
        }) = slow
        {
            setup.push(format!("node {rank} slowed {factor}×, whole run"));
        }
    }
    for line in setup {
        text(line, 4, y, 0.6)?;
        y += 17;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_specifications_parse() {
        let window = |spec| parse_slow(spec).map(|s| (s.rank, s.factor, s.window));
        assert_eq!(window("2:40"), Some((2, "40".into(), None)));
        assert_eq!(
            window("1:2.5@6"),
            Some((1, "2.5".into(), Some((6.0, None))))
        );
        assert_eq!(
            window("2:40@6-20"),
            Some((2, "40".into(), Some((6.0, Some(20.0)))))
        );
        for bad in ["2", "2:x@1", "2:4@a-3", "2:4@1-"] {
            assert_eq!(parse_slow(bad), None, "{bad}");
        }
    }

    #[test]
    fn decisions_sit_on_the_line() {
        let pts = [(1.0, 2.0), (3.0, 4.0)];
        assert_eq!(on_line(&pts, 0.0), 2.0);
        assert_eq!(on_line(&pts, 2.0), 3.0);
        assert_eq!(on_line(&pts, 9.0), 4.0);
    }

    #[test]
    fn long_jobs_are_shortened() {
        assert_eq!(shorten("abc", 80), "abc");
        let long = format!("{}{}", "a".repeat(60), "b".repeat(40));
        let short = shorten(&long, 80);
        assert_eq!(short.chars().count(), 80);
        assert!(short.starts_with("aaa") && short.ends_with("bbb") && short.contains('…'));
    }
}
