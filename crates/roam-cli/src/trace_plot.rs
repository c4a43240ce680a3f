//! `roam plot --trace TRACE -o FILE.png`: the allocation trace of `roam train
//! --trace-allocation TRACE`, drawn as Lapse's demo drew it ("Just Move It!", VLDB 2021). Top:
//! parameters × time, each key a row coloured by the node that holds it from each change on
//! (from its first change, whose sender held it before); keys that never moved have no change
//! to place them and are left blank. A replica granted by intent sharing colours the row with
//! the node it went to, although its owner keeps the key too, and replicas dropped later are
//! not recorded (the row keeps that colour until the key's next change). Bottom: per node, the share of its accesses served
//! locally over time, from the access counters sampled every 25 ms. Together they show keys
//! gathering at the nodes that use them and the local share climbing with them.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use plotters::prelude::*;
use serde::Deserialize;

use crate::suite::plots::{FAMILY, FONT, canvas, draw_legend, plot_err};

/// Keys drawn at most (every k-th key beyond): one pixel row each is plenty.
const MAX_KEYS: usize = 4000;

/// One node's trace (the fields drawn).
#[derive(Deserialize)]
struct NodeTrace {
    node: u32,
    changes: Vec<Change>,
    #[serde(default)]
    dropped: u64,
    samples: Vec<Sample>,
}

#[derive(Deserialize)]
struct Change {
    key: u64,
    from: u32,
    to: u32,
    time: f64,
}

#[derive(Deserialize)]
struct Sample {
    time: f64,
    local_keys: u64,
    all_keys: u64,
}

/// Node colours (matplotlib's tab10), by rank.
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

fn color(node: u32) -> RGBColor {
    COLORS[node as usize % COLORS.len()]
}

/// Reads the per-node lines of a trace file; errors name the file.
fn load(path: &Path) -> anyhow::Result<Vec<NodeTrace>> {
    let name = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    let mut nodes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(start) = line.find("{\"roam_allocation_trace\"") else {
            continue;
        };
        #[derive(Deserialize)]
        struct Line {
            roam_allocation_trace: NodeTrace,
        }
        let parsed: Line = serde_json::from_str(&line[start..])
            .with_context(|| format!("{name}:{}: a malformed trace line", i + 1))?;
        nodes.push(parsed.roam_allocation_trace);
    }
    if nodes.is_empty() {
        bail!(
            "{name}: not a roam allocation trace (no roam_allocation_trace line; write one with \
             `roam train ... --trace-allocation FILE`)"
        );
    }
    nodes.sort_by_key(|n| n.node);
    Ok(nodes)
}

/// Each drawn key's holders: (from time, holder) segments, the first from the run's start.
fn holders(nodes: &[NodeTrace], start: f64) -> BTreeMap<u64, Vec<(f64, u32)>> {
    let mut changes: Vec<&Change> = nodes.iter().flat_map(|n| &n.changes).collect();
    changes.sort_by(|a, b| a.time.total_cmp(&b.time));
    let mut keys: BTreeMap<u64, Vec<(f64, u32)>> = BTreeMap::new();
    for c in changes {
        let segments = keys.entry(c.key).or_insert_with(|| vec![(start, c.from)]);
        segments.push((c.time, c.to));
    }
    let stride = keys.len().div_ceil(MAX_KEYS).max(1);
    keys.into_iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0)
        .map(|(_, kv)| kv)
        .collect()
}

/// Per node, (time, local share) between consecutive samples that saw accesses.
fn local_shares(node: &NodeTrace, start: f64) -> Vec<(f64, f64)> {
    node.samples
        .windows(2)
        .filter_map(|w| {
            let all = w[1].all_keys.checked_sub(w[0].all_keys)?;
            let local = w[1].local_keys.checked_sub(w[0].local_keys)?;
            (all > 0).then(|| (w[1].time - start, local as f64 / all as f64))
        })
        .collect()
}

/// `roam plot --trace`.
pub(crate) fn run(trace: &Path, out: &Path, title: Option<&str>) -> anyhow::Result<i32> {
    let nodes = load(trace)?;
    plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled font does not parse"))?;
    let default = format!(
        "where the parameters are: {} node(s), {} changes",
        nodes.len(),
        nodes.iter().map(|n| n.changes.len()).sum::<usize>()
    );
    draw(out, title.unwrap_or(&default), &nodes)
        .with_context(|| format!("drawing {}", out.display()))?;
    let dropped: u64 = nodes.iter().map(|n| n.dropped).sum();
    if dropped > 0 {
        eprintln!("note: the trace dropped {dropped} changes past its size limit");
    }
    println!("{}", out.display());
    Ok(0)
}

fn draw(path: &Path, title: &str, nodes: &[NodeTrace]) -> anyhow::Result<()> {
    let times = nodes.iter().flat_map(|n| {
        n.samples
            .iter()
            .map(|s| s.time)
            .chain(n.changes.iter().map(|c| c.time))
    });
    let start = times.clone().fold(f64::INFINITY, f64::min);
    let end = times.fold(f64::NEG_INFINITY, f64::max);
    if !start.is_finite() {
        bail!("the trace has no samples and no changes");
    }
    let span = (end - start).max(1e-3);
    let keys = holders(nodes, start);
    let max_key = keys.keys().next_back().copied().unwrap_or(0) as f64 + 1.0;
    let (root, areas) = canvas(path, (1500, 820), title, (1, 1))?;
    let (top, bottom) = areas[0].split_vertically(470);

    let mut chart = ChartBuilder::on(&top)
        .caption(
            "parameters × time, coloured by the node holding each (keys that never moved: blank)",
            (FAMILY, 15),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..span, 0.0..max_key)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("key")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .label_style((FAMILY, 12))
        .axis_desc_style((FAMILY, 12))
        .draw()
        .map_err(plot_err)?;
    // A key's row: one rectangle per holder, as high as the rows drawn allow.
    let row = (max_key / keys.len().max(1) as f64).max(1.0);
    let segments = keys.iter().flat_map(|(&key, holds)| {
        holds.iter().enumerate().map(move |(i, &(from, node))| {
            let to = holds.get(i + 1).map_or(end, |h| h.0);
            let y = key as f64;
            Rectangle::new(
                [(from - start, y), (to - start, y + row)],
                color(node).filled(),
            )
        })
    });
    chart.draw_series(segments).map_err(plot_err)?;

    let mut chart = ChartBuilder::on(&bottom)
        .caption("share of each node's accesses served locally", (FAMILY, 15))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..span, 0.0..1.05)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("local share")
        .light_line_style(WHITE)
        .label_style((FAMILY, 12))
        .axis_desc_style((FAMILY, 12))
        .draw()
        .map_err(plot_err)?;
    for node in nodes {
        let c = color(node.node);
        let points = local_shares(node, start);
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(format!("node {}", node.node))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 2, c.filled())))
            .map_err(plot_err)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight, 12)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: u64, from: u32, to: u32, time: f64) -> Change {
        Change {
            key,
            from,
            to,
            time,
        }
    }

    #[test]
    fn a_key_is_held_by_its_first_sender_until_its_first_change() {
        let nodes = vec![
            NodeTrace {
                node: 0,
                changes: vec![change(5, 1, 0, 12.0)],
                dropped: 0,
                samples: Vec::new(),
            },
            NodeTrace {
                node: 1,
                changes: vec![change(5, 0, 1, 11.0)],
                dropped: 0,
                samples: Vec::new(),
            },
        ];
        let keys = holders(&nodes, 10.0);
        assert_eq!(keys[&5], vec![(10.0, 0), (11.0, 1), (12.0, 0)]);
    }

    #[test]
    fn local_shares_are_per_interval_between_samples() {
        let sample = |time, local_keys, all_keys| Sample {
            time,
            local_keys,
            all_keys,
        };
        let node = NodeTrace {
            node: 0,
            changes: Vec::new(),
            dropped: 0,
            samples: vec![
                sample(1.0, 0, 0),
                sample(2.0, 5, 10),
                sample(3.0, 5, 10),
                sample(4.0, 14, 20),
            ],
        };
        assert_eq!(local_shares(&node, 1.0), vec![(1.0, 0.5), (3.0, 0.9)]);
    }
}
