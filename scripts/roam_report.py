"""Reading `roam train` reports in the scripts, from any roam binary.

Since `roam train` prints readable per-epoch lines by default, its machine-readable report (one
JSON line from rank 0, then one `roam_node_stats` line per node) is on stdout only with `--json`
(or in the file of `--report FILE`). Older binaries have no `--json` and always print it; A/B
scripts run both, so they ask each binary with `json_flag` and parse with `find_report`, which
takes any of these forms (with or without `roam launch`'s `[node R] ` prefixes).
"""

import functools
import json
import subprocess


@functools.lru_cache(maxsize=None)
def json_flag(roam):
    """["--json"] if this roam binary has `roam train ... --json`, else [] (it always prints)."""
    out = subprocess.run([roam, "train", "mf", "--help"], capture_output=True, text=True)
    return ["--json"] if "--json" in out.stdout else []


def with_json(cmd):
    """`cmd` (a `roam ... train ...` command line, maybe under `roam launch -- `) with `--json`
    added when its training binary has the flag and it is not there yet."""
    cmd = list(cmd)
    if "--json" in cmd or "train" not in cmd:
        return cmd
    at = cmd.index("train")
    return cmd + json_flag(cmd[at - 1])


def _bodies(text):
    for line in text.splitlines():
        if line.startswith("[node ") and "] " in line:
            line = line.split("] ", 1)[1]
        line = line.strip()
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def is_report(obj):
    return isinstance(obj, dict) and isinstance(obj.get("app"), str) and isinstance(obj.get("epochs"), list)


def find_report(text):
    """The training report in `text` (stdout of `--json` or of an older binary, or a
    `--report` file), or None."""
    try:
        whole = json.loads(text)
        if is_report(whole):
            return whole
    except json.JSONDecodeError:
        pass
    return next((o for o in _bodies(text) if is_report(o)), None)


def node_stats(text, rank=None):
    """The `roam_node_stats` objects in `text` (of `[node RANK]` lines only, if rank is given)."""
    if rank is not None:
        text = "\n".join(l for l in text.splitlines() if l.startswith(f"[node {rank}] "))
    return [o["roam_node_stats"] for o in _bodies(text) if isinstance(o, dict) and "roam_node_stats" in o]


def read_report(path):
    """The training report in file `path`; ValueError naming the file if there is none."""
    with open(path) as f:
        report = find_report(f.read())
    if report is None:
        raise ValueError(f"{path}: not a roam training report")
    return report
