#!/usr/bin/env python3
"""Predicts epoch times at 8-64 nodes from a `roam bench suite` results.json (docs/scaling.md).

Usage: scripts/scaling-model.py RESULTS.json [--profile 10gbe] [--rtt-us loopback=50,10gbe=320]
       [--bandwidth-gbit 10] [--nodes 8,16,32,64] [--cores-per-node 1]
       [--modes classic,classic-nolocal,lapse,nups,adapm]

The model, per workload and mode, for N nodes that each have their own machine:

    T(N) = T_cpu(N) + T_link(N) + T_sync(N)

    T_cpu(N)  = (C_single + c_msg * M(N) + c_byte * B(N)) / (N * cores_per_node)
    T_link(N) = B(N) / (N * bandwidth)
    T_sync(N) = S(N) * RTT_profile

- C_single: CPU seconds per epoch of `single` (the work itself).
- M(N), B(N): messages and bytes per epoch of the whole cluster, from the counters of the
  2- and 4-node runs (total over the run / epochs), extrapolated by mode: classic's bytes follow
  its remote fraction (1 - 1/N); every other volume is fitted as a + b*N through N = 2 and 4.
- c_msg, c_byte: CPU seconds per message and per byte of the message path, fitted by least
  squares to (CPU per epoch - C_single) over all distributed runs of the workload on loopback.
- S(N): synchronous round trips on one node's critical path per epoch (barriers, pulls that
  must complete before compute), measured as (T_profile - T_loopback) / (RTT_profile -
  RTT_loopback) at N = 2 and 4 and fitted as a + b*N (MF's DSGD has N barriers per epoch).
  RTTs come from `roam bench ops` (remote pull p50, batch 1).
- The 2- and 4-node runs shared the suite machine's cores, so the fit check ("model at the
  measured N") divides T_cpu by min(N, machine CPUs) instead of N.

Stdlib only.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

MODES = ["classic", "classic-nolocal", "lapse"]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def epoch_mean(run, field):
    vals = [e.get(field) for e in run["epochs"]]
    if not vals or any(v is None for v in vals):
        return None
    return sum(vals) / len(vals)


def cells(results):
    """(app, profile, mode, nodes) -> medians of per-epoch figures over ok runs."""
    groups = defaultdict(list)
    for r in results["runs"]:
        if r["status"] == "ok":
            groups[(r["app"], r["profile"], r["mode"], r["nodes"])].append(r)
    out = {}
    for key, runs in groups.items():
        n_ep = lambda r: max(len(r["epochs"]), 1)
        out[key] = {
            "seconds": median([epoch_mean(r, "seconds") for r in runs]),
            "cpu": median([epoch_mean(r, "cpu_seconds") for r in runs]),
            "messages": median([r["counters"]["messages_sent"] / n_ep(r) for r in runs]),
            "bytes": median([r["counters"]["bytes_sent"] / n_ep(r) for r in runs]),
            "relocations": median([r["counters"]["relocations"] / n_ep(r) for r in runs]),
            "local": median([r["counters"]["local_fraction"] for r in runs]),
            "runs": len(runs),
        }
    return out


def line_through(n1, y1, n2, y2):
    """a + b*N through two points."""
    b = (y2 - y1) / (n2 - n1)
    return y1 - b * n1, b


def fit_cpu_costs(cs, app, profile):
    """Least squares of (cpu - C_single) = c_msg * M + c_byte * B over the profile's runs
    (N > 1; the profile's own runs, so that its emulation's CPU cost is included)."""
    single = cs.get((app, "loopback", "single", 1))
    if not single or single["cpu"] is None:
        return None
    rows = [(c["messages"], c["bytes"], c["cpu"] - single["cpu"])
            for (a, p, m, n), c in cs.items()
            if a == app and p == profile and m != "single" and n > 1 and c["cpu"] is not None]
    if len(rows) < 2:
        return None
    smm = sum(m * m for m, _, _ in rows)
    smb = sum(m * b for m, b, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    smy = sum(m * y for m, _, y in rows)
    sby = sum(b * y for _, b, y in rows)
    det = smm * sbb - smb * smb
    if abs(det) < 1e-30:
        return None
    c_msg = (smy * sbb - sby * smb) / det
    c_byte = (sby * smm - smy * smb) / det
    # Negative costs are fitting noise: clamp and refit the other alone.
    if c_msg < 0:
        c_msg, c_byte = 0.0, max(sby / sbb, 0.0)
    if c_byte < 0:
        c_byte, c_msg = 0.0, max(smy / smm, 0.0)
    return single["cpu"], c_msg, c_byte


def model(cs, app, mode, profile, rtt, bandwidth, cores, machine_cpus, target_rtt=None):
    """Returns predict(N) or None if data is missing."""
    costs = fit_cpu_costs(cs, app, profile)
    c2 = cs.get((app, profile, mode, 2))
    c4 = cs.get((app, profile, mode, 4))
    if costs is None or c2 is None or c4 is None:
        return None
    c_single, c_msg, c_byte = costs
    m_a, m_b = line_through(2, c2["messages"], 4, c4["messages"])
    msgs_at = lambda n: max(m_a + m_b * n, 0.0)
    if mode == "classic":
        # Remote accesses are the fraction 1 - 1/N of all accesses.
        k = statistics.mean([c2["bytes"] / (1 - 1 / 2), c4["bytes"] / (1 - 1 / 4)])
        bytes_at = lambda n: k * (1 - 1 / n)
    elif mode == "classic-nolocal":
        # Every access is a message whatever N is.
        k = statistics.mean([c2["bytes"], c4["bytes"]])
        bytes_at = lambda n: k
    else:
        b_a, b_b = line_through(2, c2["bytes"], 4, c4["bytes"])
        bytes_at = lambda n: max(b_a + b_b * n, 0.0)

    def cpu_total(n):
        return c_single + c_msg * msgs_at(n) + c_byte * bytes_at(n)

    # Synchronous round trips: the measured time that neither CPU (on the suite machine's
    # cores) nor the link explains, in round trips of the profile.
    def rounds(c, n):
        explained = cpu_total(n) / min(n, machine_cpus) + bytes_at(n) / n / bandwidth
        return max(c["seconds"] - explained, 0.0) / rtt[profile]

    r2, r4 = rounds(c2, 2), rounds(c4, 4)
    s_a, s_b = line_through(2, r2, 4, r4)
    if s_b < 0:  # fewer stalls at 4 nodes than at 2: noise; keep the mean, do not extrapolate
        s_a, s_b = (r2 + r4) / 2, 0.0

    def predict(n):
        t_cpu = cpu_total(n) / (n * cores)
        t_link = bytes_at(n) / n / bandwidth
        sync_rounds = max(s_a + s_b * n, 0.0)
        t_sync = sync_rounds * (target_rtt if target_rtt is not None else rtt[profile])
        return {
            "seconds": t_cpu + t_link + t_sync,
            "cpu": t_cpu,
            "link": t_link,
            "sync": t_sync,
            "messages": msgs_at(n),
            "bytes": bytes_at(n),
            "sync_rounds": sync_rounds,
        }

    predict.measured_rounds = (r2, r4)
    return predict


def fmt(x, unit=""):
    if x is None:
        return "–"
    a = abs(x)
    if a >= 1e9:
        return f"{x / 1e9:.2f} G{unit}"
    if a >= 1e6:
        return f"{x / 1e6:.2f} M{unit}"
    if a >= 1e3:
        return f"{x / 1e3:.1f} k{unit}"
    if a >= 10:
        return f"{x:.1f}{unit}"
    if a >= 0.01:
        return f"{x:.3f}{unit}"
    return f"{x:.2e}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--profile", default="10gbe")
    ap.add_argument("--rtt-us", default="loopback=50,10gbe=320,1gbe=414",
                    help="round trip (remote pull p50, batch 1) per profile, from roam bench ops")
    ap.add_argument("--bandwidth-gbit", type=float, default=10.0)
    ap.add_argument("--target-rtt-us", type=float,
                    help="predict for this round trip instead of the profile's (what-if)")
    ap.add_argument("--nodes", default="8,16,32,64")
    ap.add_argument("--cores-per-node", type=int, default=1,
                    help="cores per node machine (the suite ran one worker per node)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="modes to predict (each needs 2- and 4-node runs at the profile)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    with open(args.results) as f:
        results = json.load(f)
    rtt = {k: float(v) / 1e6 for k, v in (kv.split("=") for kv in args.rtt_us.split(","))}
    bandwidth = args.bandwidth_gbit * 1e9 / 8
    nodes = [int(n) for n in args.nodes.split(",")]
    machine_cpus = results.get("cpus", 2)
    target = args.target_rtt_us / 1e6 if args.target_rtt_us is not None else None
    cs = cells(results)
    apps = sorted({k[0] for k in cs})

    print(f"Model inputs: {args.results}, profile {args.profile}, RTT {rtt[args.profile] * 1e6:.0f} µs "
          f"(loopback {rtt['loopback'] * 1e6:.0f} µs), {args.bandwidth_gbit:g} Gbit/s, "
          f"{args.cores_per_node} core(s) per node.\n")
    print(f"Fitted CPU costs ({args.profile} runs): C_single = single's CPU s/epoch; c_msg, c_byte = "
          "CPU per message and per byte sent.\n")
    print("| workload | C_single s | c_msg µs | c_byte ns |")
    print("|---|---|---|---|")
    for app in apps:
        costs = fit_cpu_costs(cs, app, args.profile)
        if costs:
            print(f"| {app} | {costs[0]:.3f} | {costs[1] * 1e6:.2f} | {costs[2] * 1e9:.3f} |")

    print("\nSynchronous round trips per epoch at the measured node counts (the measured time "
          f"that CPU on the suite machine's {machine_cpus} CPUs and the link do not explain, "
          f"in {args.profile} round trips):\n")
    print("| workload | mode | 2 nodes: measured s / rounds | 4 nodes: measured s / rounds |")
    print("|---|---|---|---|")
    for app in apps:
        for mode in modes:
            p = model(cs, app, mode, args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus)
            if p is None:
                continue
            r2, r4 = p.measured_rounds
            m2 = cs[(app, args.profile, mode, 2)]["seconds"]
            m4 = cs[(app, args.profile, mode, 4)]["seconds"]
            print(f"| {app} | {mode} | {fmt(m2)} / {r2:.0f} | {fmt(m4)} / {r4:.0f} |")

    rtt_used = target if target is not None else rtt[args.profile]
    print(f"\nPredicted epoch seconds, one machine per node ({args.profile} volumes, "
          f"RTT {rtt_used * 1e6:.0f} µs); in brackets: CPU / link / sync parts\n")
    print("| workload | mode | " + " | ".join(f"{n} nodes" for n in nodes) + " | single |")
    print("|---|---|" + "---|" * (len(nodes) + 1))
    for app in apps:
        single = cs.get((app, "loopback", "single", 1))
        for mode in modes:
            p = model(cs, app, mode, args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus, target)
            if p is None:
                print(f"| {app} | {mode} | " + " | ".join("–" for _ in nodes) + " | |")
                continue
            row = []
            for n in nodes:
                r = p(n)
                row.append(f"{fmt(r['seconds'])} ({fmt(r['cpu'])} / {fmt(r['link'])} / {fmt(r['sync'])})")
            print(f"| {app} | {mode} | " + " | ".join(row) + f" | {fmt(single and single['seconds'])} |")

    print("\nPredicted speed-up over single (single's measured epoch time / the mode's "
          "predicted; N nodes would give N)\n")
    print("| workload | mode | " + " | ".join(f"{n} nodes" for n in nodes) + " |")
    print("|---|---|" + "---|" * len(nodes))
    for app in apps:
        single = cs.get((app, "loopback", "single", 1))
        if not single:
            continue
        for mode in modes:
            p = model(cs, app, mode, args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus, target)
            if p is None:
                continue
            print(f"| {app} | {mode} | " + " | ".join(
                f"{single['seconds'] / p(n)['seconds']:.2f}" for n in nodes) + " |")

    print("\nPredicted speed-up of lapse (other mode's predicted epoch time / lapse's)\n")
    print("| workload | over | " + " | ".join(f"{n} nodes" for n in nodes) + " |")
    print("|---|---|" + "---|" * len(nodes))
    for app in apps:
        lapse = model(cs, app, "lapse", args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus, target)
        for other in ["classic", "classic-nolocal"]:
            o = model(cs, app, other, args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus, target)
            if lapse is None or o is None:
                continue
            print(f"| {app} | {other} | " + " | ".join(
                f"{o(n)['seconds'] / lapse(n)['seconds']:.2f}" for n in nodes) + " |")

    print("\nExtrapolated volumes per epoch (whole cluster): messages / bytes / sync rounds\n")
    print("| workload | mode | " + " | ".join(f"{n} nodes" for n in nodes) + " |")
    print("|---|---|" + "---|" * len(nodes))
    for app in apps:
        for mode in modes:
            p = model(cs, app, mode, args.profile, rtt, bandwidth, args.cores_per_node, machine_cpus, target)
            if p is None:
                continue
            print(f"| {app} | {mode} | " + " | ".join(
                f"{fmt(p(n)['messages'])} / {fmt(p(n)['bytes'], 'B')} / {p(n)['sync_rounds']:.0f}"
                for n in nodes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
