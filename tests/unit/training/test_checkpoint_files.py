"""Checkpoint files and manifests on a real file system (no torch needed)."""

import hashlib
import json
import os

from .conftest import WORKLOAD, load_module

wl = load_module(WORKLOAD, "trainnet_workload_checkpoints")


def write(directory, step, data, seed=1, width=8):
    return wl.write_checkpoint(str(directory), step, data, "node-a", 1, 2, "run", {"seed": seed, "width": width})


def test_manifest_describes_the_file_written(tmp_path):
    path, manifest_path, manifest = write(tmp_path, 7, b"weights" * 100)
    with open(manifest_path) as handle:
        assert json.load(handle) == manifest
    with open(path, "rb") as handle:
        data = handle.read()
    assert (manifest["step"], manifest["size"], manifest["sha256"]) == (7, 700, hashlib.sha256(data).hexdigest())
    assert sorted(os.listdir(tmp_path)) == ["step-00000007-node-a.manifest.json", "step-00000007-node-a.pt"]


def test_resume_picks_the_newest_checkpoint_that_matches_its_manifest(tmp_path):
    write(tmp_path, 2, b"two")
    good = write(tmp_path, 4, b"four")[0]
    corrupt = write(tmp_path, 6, b"six")[0]
    with open(corrupt, "r+b") as handle:
        handle.write(b"S")  # same size, other bytes: only the digest catches it
    write(tmp_path, 8, b"other model", width=16)
    # A checkpoint without a manifest is one whose writer died before finishing: never used.
    (tmp_path / "step-00000010-node-a.pt").write_bytes(b"ten")
    assert wl.latest_valid_checkpoint(str(tmp_path), seed=1, width=8) == (4, good)
    assert wl.latest_valid_checkpoint(str(tmp_path), seed=1, width=16)[0] == 8
    assert wl.latest_valid_checkpoint(str(tmp_path / "missing"), seed=1, width=8) == (0, None)
