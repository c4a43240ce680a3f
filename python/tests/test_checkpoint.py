"""Checkpoints from Python: a worker's checkpoint restores into a new node, its shards open
with a plain safetensors reader (the format PyTorch users load), and a damaged one is refused."""

import json
import struct
import threading

import numpy as np
import pytest

import roam


def read_shard(path):
    """A minimal safetensors reader (what `safetensors.numpy.load_file` does)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        dtype = {"U64": np.uint64, "F32": np.float32}[t["dtype"]]
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(t["shape"])
    return out


def test_checkpoint_restores_and_reads_without_roam(tmp_path):
    ckpt = tmp_path / "ckpt"
    with roam.Node(num_keys=10, value_lengths=3, workers=2) as node:
        w = node.worker(0)
        w.push(np.array([2, 7], dtype=np.uint64), np.arange(6, dtype=np.float32)).wait()
        errors = []

        def call(worker):
            try:
                worker.checkpoint(ckpt, epoch=5)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(node.worker(1),))]
        threads[0].start()
        call(w)
        threads[0].join()
        assert not errors
    manifest = json.loads((ckpt / "manifest.json").read_text())
    assert manifest["epoch"] == 5 and manifest["num_nodes"] == 1
    shard = read_shard(ckpt / manifest["shards"][0]["file"])
    assert shard["keys"].tolist() == list(range(10))
    assert shard["values"].shape == (10, 3)
    assert shard["values"][7].tolist() == [3.0, 4.0, 5.0]
    with roam.Node(num_keys=10, value_lengths=3, workers=2, restore_from=ckpt) as node:
        out = np.zeros(6, dtype=np.float32)
        node.worker(0).pull(np.array([2, 7], dtype=np.uint64), out).wait()
        assert out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_damaged_checkpoint_is_refused_naming_the_file(tmp_path):
    ckpt = tmp_path / "ckpt"
    with roam.Node(num_keys=10, value_lengths=3, workers=1) as node:
        node.worker(0).checkpoint(ckpt)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    shard = ckpt / manifest["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(roam.StartError, match=shard.name):
        roam.Node(num_keys=10, value_lengths=3, workers=1, restore_from=ckpt)
