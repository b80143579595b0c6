"""labkit.measure.results: JSON result records, reference results, provenance."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from labkit.support import paths
from labkit.measure import results
from labkit.measure.results import (
    SCHEMA_VERSION,
    Result,
    SchemaError,
    copy_to_reference,
    list_references,
    load_reference,
    load_result,
    provenance_line,
    reference_index,
    save_result,
)

GPU_ENV = {
    "tier": "gpu", "gpu_name": "NVIDIA H200", "gpu_count": 1, "driver": "580.95.05",
    "cuda": "13.0", "torch": "2.11.0", "python": "3.12.3", "platform": "Linux", "cpu": "x",
    "cpu_count": 16, "clocks": None, "git_commit": "abc1234def5678abc1234def5678abc1234def56",
    "git_dirty": False, "labkit": "0.1.0", "date": "2026-11-29T12:00:00+00:00",
}
CPU_ENV = dict(GPU_ENV, tier="cpu", gpu_name=None, gpu_count=0, driver=None, cuda=None,
               cpu="AMD EPYC", git_commit=None, git_dirty=None)


@dataclasses.dataclass
class Stats:
    median: float
    n: int


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    root = tmp_path / "data"
    monkeypatch.setenv("LABKIT_DATA", str(root))
    return root


def test_roundtrip(tmp_path):
    data = {
        "median_us": np.float64(6.8),
        "count": np.int64(3),
        "ok": np.bool_(True),
        "series": np.arange(3, dtype=np.float32),
        "tensor": torch.tensor([[1, 2], [3, 4]]),
        "scalar_tensor": torch.tensor(2.5),
        "dtype": torch.bfloat16,
        "np_dtype": np.dtype("float16"),
        "stats": Stats(median=1.5, n=7),
        "sizes": (1, 2, 4),
        "missing": float("nan"),
        "by_batch": {1: 0.5, 2: 0.7},
        "path": Path("a/b"),
    }
    path = save_result("probe", data, params={"repeats": 100}, run_dir=tmp_path)
    assert path == tmp_path / "results" / "probe.json"
    raw = json.loads(path.read_text())
    assert raw["schema"] == SCHEMA_VERSION and raw["name"] == "probe"

    res = load_result(path)
    assert isinstance(res, Result)
    assert res.schema == SCHEMA_VERSION and res.name == "probe"
    assert res.params == {"repeats": 100}
    d = res.data
    assert d["median_us"] == 6.8 and d["count"] == 3 and d["ok"] is True
    assert d["series"] == [0.0, 1.0, 2.0]
    assert d["tensor"] == [[1, 2], [3, 4]] and d["scalar_tensor"] == 2.5
    assert d["dtype"] == "torch.bfloat16" and d["np_dtype"] == "float16"
    assert d["stats"] == {"median": 1.5, "n": 7}
    assert d["sizes"] == [1, 2, 4] and d["missing"] is None
    assert d["by_batch"] == {"1": 0.5, "2": 0.7} and d["path"] == "a/b"
    assert set(res.env) >= {"tier", "torch", "date"}
    assert res.created.endswith("+00:00")
    # no temporary files left behind
    assert [p.name for p in path.parent.iterdir()] == ["probe.json"]


def test_save_uses_run_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run1"))
    path = save_result("x", {"a": 1}, env=CPU_ENV)
    assert path == tmp_path / "run1" / "results" / "x.json"
    assert load_result(path).env == CPU_ENV


def test_default_run_dir_is_interactive(monkeypatch):
    monkeypatch.delenv("LABKIT_RUN_DIR", raising=False)
    assert results.default_run_dir().parts[-2:] == ("runs", "interactive")


def test_overwrite(tmp_path):
    save_result("x", {"a": 1}, run_dir=tmp_path, env=CPU_ENV)
    path = save_result("x", {"a": 2}, run_dir=tmp_path, env=CPU_ENV)
    assert load_result(path).data == {"a": 2}


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "has space"])
def test_bad_names(tmp_path, bad):
    with pytest.raises(ValueError, match="result name"):
        save_result(bad, {}, run_dir=tmp_path, env=CPU_ENV)


def test_not_serialisable(tmp_path):
    with pytest.raises(TypeError, match=r"data\['obj'\].*object"):
        save_result("x", {"obj": object()}, run_dir=tmp_path, env=CPU_ENV)
    assert not (tmp_path / "results" / "x.json").exists()


def test_schema_mismatch(tmp_path):
    path = save_result("x", {"a": 1}, run_dir=tmp_path, env=CPU_ENV)
    raw = json.loads(path.read_text())
    raw["schema"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(raw))
    with pytest.raises(SchemaError) as err:
        load_result(path)
    msg = str(err.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in msg and str(path) in msg
    assert f"reads schema version {SCHEMA_VERSION}" in msg
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "text, match",
    [("not json", "not valid JSON"), ("[1, 2]", "no 'schema'"), ('{"schema": 1}', "missing")],
)
def test_invalid_files(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SchemaError, match=match):
        load_result(path)


def test_missing_reference_error(data_root):
    with pytest.raises(FileNotFoundError) as err:
        load_reference("launch_overhead", gpu="h200")
    msg = str(err.value)
    expected = data_root / "reference" / "h200" / "launch_overhead.json"
    assert str(expected) in msg
    assert "labkit run" in msg and "labkit reference" in msg
    assert "'launch_overhead'" in msg and "'h200'" in msg


def test_reference_paths(data_root):
    assert paths.data_dir() == data_root
    assert results.reference_dir() == data_root / "reference" / "h200"
    assert results.reference_dir("NVIDIA GeForce RTX 4090") == data_root / "reference" / "rtx-4090"
    assert list_references() == [] and list_references("h200") == []


def test_reference_index_groups_records_by_folder_and_machine(tmp_path, data_root):
    run = tmp_path / "run"
    for name in ("probe_a", "probe_b", "probe_with_a_rather_long_name"):
        save_result(name, {"x": 1}, run_dir=run, env=GPU_ENV)
    copy_to_reference(run, "h200")
    h100 = dict(GPU_ENV, gpu_name="NVIDIA H100 80GB HBM3",
                git_commit="fedcba9876543210fedcba9876543210fedcba98")
    save_result("probe_h100", {"x": 1}, run_dir=tmp_path / "run2", env=h100)
    copy_to_reference(tmp_path / "run2", "h100-80gb-hbm3")
    day = load_result(data_root / "reference" / "h200" / "probe_a.json").created[:10]
    lines = reference_index(width=60)
    assert lines[0] == "h100-80gb-hbm3/  NVIDIA H100 80GB HBM3, driver 580.95.05, torch 2.11.0, CUDA 13.0"
    assert lines[1] == f"    1 record, {day}, commit fedcba9: probe_h100"
    assert lines[2] == "h200/  NVIDIA H200, driver 580.95.05, torch 2.11.0, CUDA 13.0"
    # the names wrap at the width, each name once, in order
    assert lines[3] == f"    3 records, {day}, commit abc1234: probe_a probe_b"
    assert lines[4:] == ["    probe_with_a_rather_long_name"]
    assert all(len(lines[i]) <= 60 for i in (1, 3, 4))
    assert reference_index([]) == []


def test_default_data_dir_is_repo_data(monkeypatch):
    monkeypatch.delenv("LABKIT_DATA", raising=False)
    assert paths.data_dir() == Path(__file__).resolve().parents[1] / "data"


def test_copy_to_reference_and_load(tmp_path, data_root):
    run = tmp_path / "run"
    save_result("probe", {"host_us": 6.8}, run_dir=run, env=GPU_ENV)
    save_result("decode", {"eager_ms": 1.2}, run_dir=run, env=GPU_ENV)
    copied = copy_to_reference(run, "h200")
    ref = data_root / "reference" / "h200"
    assert copied == [ref / "decode.json", ref / "probe.json"]
    assert list_references("h200") == copied == list_references()
    res = load_reference("probe")
    assert res.data == {"host_us": 6.8}
    # gpu defaults to where the results were measured
    assert copy_to_reference(run) == copied
    # the error now lists what exists
    with pytest.raises(FileNotFoundError, match="decode, probe"):
        load_reference("nope")


def test_copy_to_reference_refuses_other_hardware(tmp_path, data_root):
    run = tmp_path / "run"
    save_result("decode", {"eager_ms": 9.0}, run_dir=run, env=CPU_ENV)
    with pytest.raises(ValueError, match=r"measured elsewhere: decode.json \(cpu\)"):
        copy_to_reference(run, "h200")
    assert not (data_root / "reference" / "h200").exists()
    assert copy_to_reference(run, "h200", force=True)
    with pytest.raises(FileNotFoundError, match="no result files"):
        copy_to_reference(tmp_path / "empty", "h200")


def test_provenance_line_gpu():
    res = Result(name="x", data={}, params={}, env=GPU_ENV, schema=1,
                 created="2026-11-29T12:00:00+00:00")
    assert provenance_line(res) == (
        "measured on NVIDIA H200, driver 580.95.05, torch 2.11.0, CUDA 13.0, 2026-11-29, "
        "commit abc1234"
    )


def test_provenance_line_leaves_out_unknowns():
    env = dict(GPU_ENV, driver=None, git_commit=None)
    res = Result(name="x", data={}, params={}, env=env, schema=1, created="2026-11-29T12:00:00+00:00")
    assert provenance_line(res) == "measured on NVIDIA H200, torch 2.11.0, CUDA 13.0, 2026-11-29"
    res = Result(name="x", data={}, params={}, env=CPU_ENV, schema=1, created="2026-01-02T00:00:00+00:00")
    assert provenance_line(res) == "measured on CPU (AMD EPYC), torch 2.11.0, 2026-01-02"


def test_new_run_dir(tmp_path):
    a = results.new_run_dir("sweep", root=tmp_path)
    b = results.new_run_dir("sweep", root=tmp_path)
    assert a.is_dir() and b.is_dir() and a != b and a.name.endswith("-sweep")


def test_nonfinite_written_as_null(tmp_path):
    path = save_result("x", {"a": [math.inf, -math.inf, 1.0]}, run_dir=tmp_path, env=CPU_ENV)
    assert "Infinity" not in path.read_text()
    assert load_result(path).data == {"a": [None, None, 1.0]}
