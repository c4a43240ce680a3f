"""scripts/roam_report.py, which the benchmark and A/B scripts read `roam train` reports with:
it passes `--json` only to binaries that have it and reads the report from `--json` output,
from older binaries' output (always JSON) and from `--report` files."""

import importlib.util
import json
import stat
import subprocess

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("roam_report", REPO / "scripts" / "roam_report.py")
roam_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(roam_report)

REPORT = {"app": "mf", "mode": "lapse", "nodes": 2, "epochs": [{"epoch": 1, "loss": 3.0}]}
STATS = {"roam_node_stats": {"rank": 1, "relocations_in": 4}}


def fake_roam(tmp_path, name, has_json):
    """A stand-in binary whose `train mf --help` lists `--json` or not."""
    path = tmp_path / name
    flag = "      --json\n" if has_json else ""
    path.write_text(f"#!/bin/sh\nprintf '  --mode <MODE>\\n{flag}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_json_is_passed_only_to_binaries_that_have_it(tmp_path):
    new, old = fake_roam(tmp_path, "new", True), fake_roam(tmp_path, "old", False)
    assert roam_report.with_json([new, "train", "mf"]) == [new, "train", "mf", "--json"]
    assert roam_report.with_json([old, "train", "mf"]) == [old, "train", "mf"]
    launched = [new, "launch", "--nodes", "2", "--", new, "train", "kge"]
    assert roam_report.with_json(launched) == launched + ["--json"]
    # Already there, or no training job: unchanged.
    assert roam_report.with_json([new, "train", "mf", "--json"]) == [new, "train", "mf", "--json"]
    assert roam_report.with_json([new, "bench", "ops"]) == [new, "bench", "ops"]


def test_reports_are_found_in_every_form(tmp_path):
    line = json.dumps(REPORT)
    launched = f"[node 0] epoch 1/1  0.1 s  loss 3.0\n[node 1] {json.dumps(STATS)}\n[node 0] {line}\n"
    assert roam_report.find_report(launched) == REPORT
    assert roam_report.find_report(line + "\n" + json.dumps(STATS)) == REPORT
    assert roam_report.node_stats(launched) == [STATS["roam_node_stats"]]
    assert roam_report.node_stats(launched, rank=0) == []
    assert roam_report.find_report("epoch 1/1  0.1 s  loss 3.0\n") is None
    path = tmp_path / "report.json"
    path.write_text(line + "\n" + json.dumps(STATS) + "\n")
    assert roam_report.read_report(path) == REPORT
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="report.json"):
        roam_report.read_report(path)


def test_the_built_binary_gets_json_and_its_report_parses(roam_bin):
    cmd = roam_report.with_json([roam_bin, "train", "mf", "--mode", "single", "--epochs", "1"])
    assert cmd[-1] == "--json"
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    report = roam_report.find_report(out.stdout)
    assert report["app"] == "mf" and len(report["epochs"]) == 1
    assert len(roam_report.node_stats(out.stdout)) == 1
