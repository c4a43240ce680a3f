//! Dynamic table under a row budget (issue #17): a factorization machine trained on synthetic
//! clicks whose ids follow a Zipf(1.1) stream, once with an unbounded sparse table and once
//! with a dynamic table whose budget is a fraction (default 10 %) of the stream's distinct ids,
//! evicting by the LRU clock (then with count admission, then with evicted rows kept in a spill
//! file); reports the peak RSS (VmHWM), rows held, evictions, the hit rate and the quality
//! (progressive log-loss, held-out AUC) of each.
//!
//! `cargo run --release -p roam --example dynamic_bench -- [examples] [fields] [ids_per_field]
//! [budget_fraction] [min_count]`
//!
//! The parent process generates nothing but the distinct-id count; each table is trained in a
//! child process of its own (this binary, `--child ...`), so that each peak RSS is that table's.
//!
//! Data: example `e` has one id per field; field `f`'s id of rank `r` (Zipf(1.1) over
//! `ids_per_field` ranks, drawn by inverting the continuous power law and flooring) is
//! `mix64(f << 40 | r)`, an arbitrary `u64`. The click probability is
//! `sigmoid(b* + Σ w*_i + Σ_{i<j} <v*_i, v*_j>)` with `w*`, `v*` drawn from each id's hash, so
//! the task is exactly learnable by the model: a factorization machine whose row per id is
//! `[w, v_1..v_8]`, trained by Adagrad on the server (`push_gradients`), rows initialised
//! normal(0, 0.01). The last 10 % of the examples are held out for the AUC.

use std::collections::HashSet;
use std::process::Command;

use anyhow::{Context, bail};
use roam::{Admission, Config, DynamicPolicy, Initializer, NodeHandle, Optimizer};

const K: usize = 8;
const DIM: usize = 1 + K;
const BATCH: usize = 1000;
/// The bias: one more id, seen by every example.
const BIAS_ID: u64 = u64::MAX;

fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

struct Stream {
    fields: usize,
    ids_per_field: u64,
}

impl Stream {
    /// Zipf(1.1) rank in `0..ids_per_field` from a uniform `u`.
    fn rank(&self, u: f64) -> u64 {
        let s = 1.1f64;
        let n = self.ids_per_field as f64 + 1.0;
        let tail = n.powf(1.0 - s);
        let x = (1.0 - u * (1.0 - tail)).powf(1.0 / (1.0 - s));
        (x.floor() as u64).clamp(1, self.ids_per_field) - 1
    }

    /// Example `e`'s ids (one per field) and click.
    fn example(&self, e: u64, ids: &mut Vec<u64>) -> bool {
        ids.clear();
        for f in 0..self.fields as u64 {
            let u = unit(mix64(e.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix64(f + 1)));
            ids.push(mix64((f << 40) | self.rank(u)));
        }
        let logit = truth_logit(ids);
        let p = 1.0 / (1.0 + (-logit).exp());
        unit(mix64(e ^ 0x1234_5678_9abc_def0)) < p
    }
}

/// The true model's row of `id`: `w*` and `v*`.
fn truth_row(id: u64) -> [f64; DIM] {
    let mut row = [0.0; DIM];
    for (j, r) in row.iter_mut().enumerate() {
        let u = unit(mix64(id ^ mix64(j as u64 + 77)));
        // Uniform with the std of N(0, σ): w* σ = 0.6, v* σ = 0.3.
        let scale = if j == 0 { 0.6 } else { 0.3 };
        *r = (u - 0.5) * scale * 12f64.sqrt();
    }
    row
}

fn truth_logit(ids: &[u64]) -> f64 {
    let rows: Vec<[f64; DIM]> = ids.iter().map(|&id| truth_row(id)).collect();
    fm_logit(-0.8, rows.iter().map(|r| &r[..]))
}

/// `b + Σ w_i + Σ_{i<j} <v_i, v_j>` by the usual `(Σv)² − Σv²` identity.
fn fm_logit<'a>(b: f64, rows: impl Iterator<Item = &'a [f64]>) -> f64 {
    let mut lin = b;
    let mut sum = [0.0; K];
    let mut sq = 0.0;
    for r in rows {
        lin += r[0];
        for k in 0..K {
            sum[k] += r[1 + k];
            sq += r[1 + k] * r[1 + k];
        }
    }
    lin + 0.5 * (sum.iter().map(|s| s * s).sum::<f64>() - sq)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn auc(scored: &mut [(f64, bool)]) -> f64 {
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut pos, mut neg, mut rank_sum) = (0f64, 0f64, 0f64);
    for (i, &(_, y)) in scored.iter().enumerate() {
        if y {
            pos += 1.0;
            rank_sum += i as f64 + 1.0;
        } else {
            neg += 1.0;
        }
    }
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

/// Trains one table and prints its report as one JSON line.
fn child(
    examples: u64,
    stream: &Stream,
    max_rows: Option<u64>,
    min_count: u32,
    spill: bool,
) -> anyhow::Result<()> {
    let spill_dir = std::env::temp_dir().join(format!("roam-dynamic-bench-{}", std::process::id()));
    let mut cfg = Config::sparse(DIM as u32);
    cfg.workers_per_node = Some(1);
    cfg.print_stats = false;
    cfg.optimizer = Some(Optimizer::adagrad(0.05));
    cfg.initializer = Initializer::Normal {
        mean: 0.0,
        std: 0.01,
        seed: 1,
    };
    if let Some(max_rows) = max_rows {
        cfg.dynamic = Some(DynamicPolicy {
            admission: if min_count > 1 {
                Admission::Count {
                    min_count,
                    sketch_width: 1 << 20,
                }
            } else {
                Admission::All
            },
            max_rows: Some(max_rows),
            max_bytes: None,
            ttl_ns: None,
            ttl_steps: None,
            spill,
        });
        cfg.spill_dir = spill.then(|| spill_dir.clone());
    }
    let node = NodeHandle::start(cfg)?;
    let w = node.worker(0)?;
    let train = examples - examples / 10;
    let start = std::time::Instant::now();
    let (mut ids, mut keys, mut slots) = (Vec::new(), Vec::new(), Vec::new());
    let mut vals = Vec::new();
    let mut grads = Vec::new();
    let mut logloss = 0.0f64;
    let mut lookups = 0u64;
    let mut peak_rows = 0u64;
    let mut scored = Vec::new();
    let mut e = 0;
    while e < examples {
        let end = (e + BATCH as u64).min(if e < train { train } else { examples });
        // Unique ids of the batch, and each example's slots into them.
        keys.clear();
        slots.clear();
        let mut index = std::collections::HashMap::new();
        let mut clicks = Vec::new();
        for ex in e..end {
            let click = stream.example(ex, &mut ids);
            clicks.push(click);
            for &id in ids.iter().chain(std::iter::once(&BIAS_ID)) {
                let slot = *index.entry(id).or_insert_with(|| {
                    keys.push(id);
                    keys.len() - 1
                });
                slots.push(slot);
            }
        }
        lookups += keys.len() as u64;
        vals.resize(keys.len() * DIM, 0.0);
        w.pull(&keys, &mut vals)?.wait()?;
        grads.clear();
        grads.resize(keys.len() * DIM, 0.0);
        let per = stream.fields + 1;
        for (i, &click) in clicks.iter().enumerate() {
            let rows: Vec<Vec<f64>> = slots[i * per..(i + 1) * per]
                .iter()
                .map(|&s| {
                    vals[s * DIM..(s + 1) * DIM]
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect()
                })
                .collect();
            // The bias row's w is the bias; its v is unused (kept at its init).
            let logit = fm_logit(0.0, rows[..per - 1].iter().map(|r| &r[..])) + rows[per - 1][0];
            let p = (1.0 / (1.0 + (-logit).exp())).clamp(1e-7, 1.0 - 1e-7);
            let y = if click { 1.0 } else { 0.0 };
            if e < train {
                logloss -= y * p.ln() + (1.0 - y) * (1.0 - p).ln();
                let g = p - y;
                let mut sum = [0.0; K];
                for r in &rows[..per - 1] {
                    for k in 0..K {
                        sum[k] += r[1 + k];
                    }
                }
                for (f, &s) in slots[i * per..(i + 1) * per].iter().enumerate() {
                    let gr = &mut grads[s * DIM..(s + 1) * DIM];
                    gr[0] += g as f32;
                    if f < per - 1 {
                        for k in 0..K {
                            gr[1 + k] += (g * (sum[k] - rows[f][1 + k])) as f32;
                        }
                    }
                }
            } else {
                scored.push((p, click));
            }
        }
        if e < train {
            w.push_gradients(&keys, &grads)?.wait()?;
        }
        peak_rows = peak_rows.max(node.stats().keys_held);
        e = end;
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = node.stats();
    let report = serde_json::json!({
        "table": if max_rows.is_some() { "dynamic" } else { "unbounded" },
        "max_rows": max_rows,
        "min_count": min_count,
        "spill": spill,
        "rows_spilled": stats.rows_spilled,
        "rows_unspilled": stats.rows_unspilled,
        "spill_file_bytes": std::fs::metadata(spill_dir.join("roam-spill-node-0.bin")).map_or(0, |m| m.len()),
        "rows_held": stats.keys_held,
        "peak_rows_sampled": peak_rows,
        "rows_created": stats.keys_created,
        "rows_evicted": stats.rows_evicted,
        "rows_rejected": stats.rows_rejected,
        "grads_dropped": stats.grads_dropped,
        "lookups": lookups,
        "hit_rate": 1.0 - (stats.keys_created + stats.rows_rejected) as f64 / lookups as f64,
        "train_logloss": logloss / train as f64,
        "test_auc": auc(&mut scored),
        "vm_hwm_mib": vm_hwm_kib() as f64 / 1024.0,
        "seconds": secs,
    });
    drop(w);
    node.shutdown()?;
    let _ = std::fs::remove_dir_all(&spill_dir);
    println!("{report}");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let num = |i: usize| -> anyhow::Result<u64> {
            args.get(i)
                .context("child argument")?
                .parse()
                .context("child argument")
        };
        let stream = Stream {
            fields: num(2)? as usize,
            ids_per_field: num(3)?,
        };
        let max_rows = match num(4)? {
            0 => None,
            n => Some(n),
        };
        return child(num(1)?, &stream, max_rows, num(5)? as u32, num(6)? == 1);
    }
    let arg = |i: usize, default: f64| -> anyhow::Result<f64> {
        Ok(match args.get(i) {
            Some(a) => a.parse()?,
            None => default,
        })
    };
    let examples = arg(0, 1_000_000.0)? as u64;
    let fields = arg(1, 8.0)? as usize;
    let ids_per_field = arg(2, 1_000_000.0)? as u64;
    let fraction = arg(3, 0.1)?;
    let min_count = arg(4, 1.0)? as u32;
    let stream = Stream {
        fields,
        ids_per_field,
    };
    let mut distinct = HashSet::new();
    let mut ids = Vec::new();
    for e in 0..examples {
        stream.example(e, &mut ids);
        distinct.extend(ids.iter().copied());
    }
    let distinct = distinct.len() as u64 + 1;
    let budget = ((distinct as f64 * fraction) as u64).max(1);
    println!(
        "{examples} examples, {fields} fields, Zipf(1.1) over {ids_per_field} ids per field: \
         {distinct} distinct ids; budget {budget} rows ({:.0} %)",
        fraction * 100.0
    );
    let exe = std::env::current_exe()?;
    let runs = [
        (0, 1, 0),
        (budget, 1, 0),
        (budget, min_count.max(2), 0),
        (budget, 1, 1),
    ];
    for (max_rows, min_count, spill) in runs {
        let out = Command::new(&exe)
            .args(["--child", &examples.to_string(), &fields.to_string()])
            .args([
                ids_per_field.to_string(),
                max_rows.to_string(),
                min_count.to_string(),
                spill.to_string(),
            ])
            .output()?;
        if !out.status.success() {
            bail!("child failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}
