"""labkit.support.env: hardware tier, environment record, GPU slugs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from labkit import __version__

from labkit.support import env

EXPECTED_KEYS = {
    "tier", "gpu_name", "gpu_count", "driver", "cuda", "torch", "python", "platform", "cpu",
    "cpu_count", "load_avg_1m", "gpu_processes", "used_cuda", "clocks", "git_commit",
    "git_dirty", "labkit", "date",
}


def test_import_labkit_is_light():
    code = "import sys, labkit; print(labkit.__version__, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [__version__, "False"]


def test_version():
    assert __version__ == "0.1.0"


def test_force_cpu_tier(monkeypatch):
    monkeypatch.setenv("LABKIT_FORCE_TIER", "cpu")
    assert env.hardware_tier() == "cpu"
    monkeypatch.setenv("LABKIT_FORCE_TIER", "CPU")
    assert env.hardware_tier() == "cpu"


def test_tier_matches_torch(monkeypatch):
    import torch

    monkeypatch.delenv("LABKIT_FORCE_TIER", raising=False)
    assert env.hardware_tier() == ("gpu" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("LABKIT_FORCE_TIER", "auto")
    assert env.hardware_tier() == ("gpu" if torch.cuda.is_available() else "cpu")


def test_bad_forced_tier(monkeypatch):
    monkeypatch.setenv("LABKIT_FORCE_TIER", "tpu")
    with pytest.raises(ValueError, match="LABKIT_FORCE_TIER"):
        env.hardware_tier()


def test_environment_record_keys_and_types():
    import torch

    rec = env.environment_record()
    assert set(rec) == EXPECTED_KEYS
    assert rec["tier"] in ("gpu", "cpu")
    assert rec["torch"] == torch.__version__
    assert rec["cuda"] == torch.version.cuda
    assert rec["labkit"] == __version__
    assert rec["python"].count(".") == 2
    when = dt.datetime.fromisoformat(rec["date"])
    assert when.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds()) < 120
    json.dumps(rec)  # JSON-ready as is
    if rec["clocks"] is not None:
        assert set(rec["clocks"]) == {"sm_mhz", "mem_mhz", "sm_max_mhz", "mem_max_mhz"}
    if rec["git_commit"] is not None:
        assert len(rec["git_commit"]) == 40 and isinstance(rec["git_dirty"], bool)


def test_record_without_gpu_invents_nothing(monkeypatch):
    """No GPU and no nvidia-smi: the GPU facts are None (or 0 GPUs seen by torch)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(env, "_nvidia_smi", lambda index=0: None)
    monkeypatch.setenv("LABKIT_FORCE_TIER", "cpu")
    rec = env.environment_record()
    assert rec["tier"] == "cpu"
    assert rec["gpu_name"] is None and rec["driver"] is None and rec["clocks"] is None
    assert rec["gpu_count"] == 0
    text = env.format_record(rec)
    assert "tier: cpu" in text and "unknown" not in text.split("\n")[0]


def test_nvidia_smi_parsing(monkeypatch):
    outputs = {
        "ok": "NVIDIA H200, 580.95.05, 1980, 3201, 1980, 3201",
        "na": "NVIDIA H200, 580.95.05, [N/A], [N/A], [N/A], [N/A]",
    }
    for kind, text in outputs.items():
        monkeypatch.setattr(env, "_run", lambda cmd, cwd=None, timeout=10.0, t=text: t)
        smi = env._nvidia_smi()
        assert smi["name"] == "NVIDIA H200" and smi["driver"] == "580.95.05"
        if kind == "ok":
            assert smi["clocks"] == {
                "sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980, "mem_max_mhz": 3201
            }
        else:
            assert smi["clocks"] is None
    monkeypatch.setattr(env, "_run", lambda cmd, cwd=None, timeout=10.0: None)
    assert env._nvidia_smi() is None


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("h200", "h200"),
        ("rtx-4090", "rtx-4090"),
    ],
)
def test_gpu_slug(name, slug):
    assert env.gpu_slug(name) == slug
    assert env.gpu_slug(slug) == slug  # idempotent


@pytest.mark.parametrize("bad", ["", "   ", "NVIDIA"])
def test_gpu_slug_rejects_empty(bad):
    with pytest.raises(ValueError):
        env.gpu_slug(bad)


def test_format_record_gpu():
    rec = {
        "tier": "gpu", "gpu_name": "NVIDIA H200", "gpu_count": 1, "driver": "580.95.05",
        "cuda": "13.0", "torch": "2.11.0", "python": "3.12.3", "platform": "Linux",
        "cpu": "Some CPU", "cpu_count": 16,
        "clocks": {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980, "mem_max_mhz": 3201},
        "git_commit": "abc1234def5678abc1234def5678abc1234def56", "git_dirty": True,
        "labkit": "0.1.0", "date": "2026-11-29T12:00:00+00:00",
    }
    text = env.format_record(rec)
    assert "NVIDIA H200" in text and "driver 580.95.05" in text and "CUDA 13.0" in text
    assert "1980/1980 MHz" in text and "commit abc1234 (uncommitted changes)" in text
    assert len(text.splitlines()) <= 8


def test_format_record_tolerates_missing_fields():
    text = env.format_record({"tier": "cpu"})
    assert "tier: cpu" in text and "not in a git checkout" in text


def test_gpu_processes_counts_distinct_pids_and_invents_nothing(monkeypatch):
    monkeypatch.setattr(env, "_run", lambda cmd, **kw: "4242\n4243\n4242\n")
    assert env._gpu_processes() == 2
    monkeypatch.setattr(env, "_run", lambda cmd, **kw: "")
    assert env._gpu_processes() == 0
    monkeypatch.setattr(env, "_run", lambda cmd, **kw: None)  # no nvidia-smi
    assert env._gpu_processes() is None


@pytest.mark.parametrize("rec, want", [
    ({"gpu_processes": 1, "used_cuda": True, "load_avg_1m": 1.0, "cpu_count": 16}, None),
    ({"gpu_processes": 0, "used_cuda": False, "load_avg_1m": 0.2, "cpu_count": 2}, None),
    ({"gpu_processes": None, "load_avg_1m": None, "cpu_count": None}, None),
    ({"gpu_processes": 2, "used_cuda": True, "load_avg_1m": 1.0, "cpu_count": 32},
     "1 other process(es) were using a GPU of this host"),
    ({"gpu_processes": 1, "used_cuda": False, "load_avg_1m": 13.0, "cpu_count": 16},
     "1 other process(es) were using a GPU of this host and the load average was 13.0 on 16"),
])
def test_contention_warning(rec, want):
    got = env.contention_warning(rec)
    if want is None:
        assert got is None
    else:
        assert want in got and "Compare ratios" in got


def test_format_record_carries_the_contention_note():
    rec = {"tier": "gpu", "gpu_name": "NVIDIA H200", "gpu_count": 2, "gpu_processes": 2,
           "used_cuda": True, "cpu_count": 32, "load_avg_1m": 1.0, "date": "2026-11-30"}
    assert "note: not an idle machine: 1 other process(es)" in env.format_record(rec)
    assert "note:" not in env.format_record({**rec, "gpu_processes": 1})

