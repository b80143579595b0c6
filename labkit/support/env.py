"""Hardware tier and environment record.

:func:`hardware_tier` says whether the CUDA measurements can run here (``"gpu"``) or the
notebooks show recorded reference results (``"cpu"``); :func:`environment_record` collects the
facts a measurement depends on (GPU, driver, CUDA, torch, clocks, git commit, ...), ``None``
for what cannot be read. torch is imported lazily (this module works without it).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from labkit import __version__

from labkit.support import envvars

Tier = Literal["gpu", "cpu"]

_VENDOR_WORDS = {"nvidia", "geforce", "tesla"}


def _torch():
    """The torch module, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _cuda_available() -> bool:
    torch = _torch()
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install raises here on some systems
        return False


def hardware_tier() -> Tier:
    """``"gpu"`` when torch sees a CUDA device (and ``LABKIT_FORCE_TIER`` allows), else cpu."""
    if envvars.force_tier() == "cpu":  # raises EnvVarError naming a bad value
        return "cpu"
    return "gpu" if _cuda_available() else "cpu"


def _run(cmd: list[str], cwd: str | os.PathLike[str] | None = None,
         timeout: float = 10.0) -> str | None:
    """stdout of a command, stripped; None when it is missing, fails or times out."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip()


def _num(text: str) -> float | int | None:
    text = text.strip()
    if not text or text.startswith("[") or text.upper() in {"N/A", "NA"}:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def _nvidia_smi(index: int = 0) -> dict[str, Any] | None:
    """Driver, name and clocks of GPU ``index`` from nvidia-smi, or None."""
    fields = ["name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
              "clocks.max.mem"]
    out = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits"])
    if not out:
        return None
    parts = [p.strip() for p in out.splitlines()[0].split(",")]
    if len(parts) != len(fields):
        return None
    name, driver = parts[:2]
    clocks = {k: _num(v) for k, v in zip(("sm_mhz", "mem_mhz", "sm_max_mhz", "mem_max_mhz"),
                                         parts[2:])}
    return {
        "name": name or None,
        "driver": driver if driver and not driver.startswith("[") else None,
        "clocks": clocks if any(v is not None for v in clocks.values()) else None,
    }


def _gpu_processes() -> int | None:
    """Compute processes on every GPU of this host, or None without nvidia-smi."""
    out = _run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"])
    if out is None:
        return None
    return len({p.strip() for p in out.splitlines() if p.strip().isdigit()})


def _load_avg() -> float | None:
    """The host's 1-minute load average, or None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def contention_warning(rec: dict[str, Any]) -> str | None:
    """A warning when an :func:`environment_record` shows a busy host, else None."""
    parts = []
    procs, own = rec.get("gpu_processes"), 1 if rec.get("used_cuda") else 0
    if isinstance(procs, int) and procs > own:
        parts.append(f"{procs - own} other process(es) were using a GPU of this host")
    load, cores = rec.get("load_avg_1m"), rec.get("cpu_count")
    if isinstance(load, (int, float)) and cores and load > 0.75 * cores:
        parts.append(f"the load average was {load:.1f} on {cores} cores")
    if not parts:
        return None
    return ("not an idle machine: " + " and ".join(parts) + "; host-bound timings (eager, the "
            "dispatcher, torch.compile) may read slower than on an idle one. Compare ratios "
            "measured in one run.")


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip() or None
    if sys.platform == "darwin" and (out := _run(["sysctl", "-n", "machdep.cpu.brand_string"])):
        return out
    return platform.processor() or None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout holding labkit (or ``LABKIT_GIT_COMMIT``)."""
    commit = envvars.git_commit()
    if commit:
        return commit, None
    here = Path(__file__).resolve().parent
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=here)
    # only the repository that holds labkit (not some checkout around a site-packages tree)
    if not top or not (Path(top) / "labkit" / "__init__.py").exists():
        return None, None
    commit = _run(["git", "rev-parse", "HEAD"], cwd=top)
    if not commit:
        return None, None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=top)
    return commit, None if status is None else bool(status)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def environment_record() -> dict[str, Any]:
    """The facts a measurement depends on, as a JSON-ready dict (``tier, gpu_name, gpu_count,
    driver, cuda, torch, python, platform, cpu, cpu_count, load_avg_1m, gpu_processes,
    used_cuda, clocks, git_commit, git_dirty, labkit, date``; ``clocks``: current and maximum
    SM and memory MHz from nvidia-smi). Items that cannot be read are ``None``."""
    torch = _torch()
    cuda_ok = _cuda_available()
    gpu_name = None
    gpu_count = None if torch is None or cuda_ok else 0
    index = 0
    if cuda_ok:
        try:
            gpu_count = int(torch.cuda.device_count())
            index = int(torch.cuda.current_device())
            gpu_name = torch.cuda.get_device_name(index)
        except Exception:
            pass
    smi = _nvidia_smi(index)
    if gpu_name is None and smi is not None:
        gpu_name = smi["name"]

    commit, dirty = git_state()
    return {
        "tier": hardware_tier(),
        "gpu_name": gpu_name,
        "gpu_count": gpu_count,
        "driver": smi["driver"] if smi else None,
        "cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None,
        "torch": getattr(torch, "__version__", None) if torch else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": _load_avg(),
        "gpu_processes": _gpu_processes() if smi else None,
        "used_cuda": bool(cuda_ok and torch.cuda.is_initialized()),
        "clocks": smi["clocks"] if smi else None,
        "git_commit": commit,
        "git_dirty": dirty,
        "labkit": __version__,
        "date": _utc_now(),
    }


def gpu_slug(name: str) -> str:
    """A short folder name for a GPU (``'NVIDIA H200'`` -> ``'h200'``), idempotent."""
    if not name or not name.strip():
        raise ValueError("gpu_slug needs a non-empty GPU name")
    words = re.split(r"[^a-z0-9]+", name.lower())
    words = [w for w in words if w and w not in _VENDOR_WORDS]
    if not words:
        raise ValueError(f"cannot make a folder name from GPU name {name!r}")
    return "-".join(words)


def format_record(rec: dict[str, Any]) -> str:
    """A few lines of human-readable text for an :func:`environment_record`."""

    def show(value: Any) -> str:
        return "unknown" if value is None else str(value)

    lines = []
    if rec.get("tier") == "gpu":
        count = rec.get("gpu_count")
        extra = f" (x{count})" if isinstance(count, int) and count > 1 else ""
        lines.append(f"tier: gpu - {show(rec.get('gpu_name'))}{extra}, driver "
                     f"{show(rec.get('driver'))}, CUDA {show(rec.get('cuda'))}")
    else:
        gpu = f" (GPU present but not used: {rec['gpu_name']})" if rec.get("gpu_name") else ""
        lines.append(f"tier: cpu - CUDA measurements show recorded reference results{gpu}")
    clocks = rec.get("clocks")
    if clocks:
        lines.append(f"clocks: SM {show(clocks.get('sm_mhz'))}/{show(clocks.get('sm_max_mhz'))}"
                     f" MHz, memory {show(clocks.get('mem_mhz'))}/"
                     f"{show(clocks.get('mem_max_mhz'))} MHz (current/max)")
    lines.append(f"torch {show(rec.get('torch'))}, Python {show(rec.get('python'))}, "
                 f"labkit {show(rec.get('labkit'))}")
    cpu = show(rec.get("cpu"))
    if rec.get("cpu_count"):
        cpu += f" ({rec['cpu_count']} logical cores)"
    lines.append(f"cpu: {cpu}; {show(rec.get('platform'))}")
    commit = rec.get("git_commit")
    if commit:
        dirty = " (uncommitted changes)" if rec.get("git_dirty") else ""
        lines.append(f"commit {commit[:7]}{dirty}")
    else:
        lines.append("commit: not in a git checkout")
    lines.append(f"date: {show(rec.get('date'))}")
    warning = contention_warning(rec)
    if warning:
        lines.append(f"note: {warning}")
    return "\n".join(lines)
