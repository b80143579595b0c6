"""``labkit images``: static PNG/SVG files of the suite's key charts, for papers, handouts and
slides made with other tools: built from the reference records (``data/reference/<gpu>/``) with
the suite's plotly builders and drawn by kaleido 1.x in the machine's own Chromium (labkit never
downloads a browser; :func:`find_browser` says how to install one).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence
from labkit.support.env import gpu_slug
from labkit.measure.results import load_reference, provenance_line, reference_dir
from labkit.teach.plots import register_template

#: Executables tried, in order, after ``$BROWSER_PATH``.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FORMATS = ("png", "svg")
WIDTH, HEIGHT, PNG_SCALE = 1100, 600, 2


class ImagesError(RuntimeError):
    """Static images cannot be made here (no browser, no kaleido, no records)."""


def find_browser() -> str:
    """Path of a local Chromium/Chrome (``$BROWSER_PATH`` first), else :class:`ImagesError`."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise ImagesError(f"BROWSER_PATH={env} is not an executable file")
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ImagesError(
        "no Chromium or Chrome found. Static images are drawn by kaleido in a local browser, and "
        "labkit never downloads one. Install Chromium (Debian/Ubuntu: `apt-get install chromium`; "
        "macOS: `brew install --cask chromium`) or point BROWSER_PATH at a Chrome/Chromium "
        "executable.")


def _kaleido():
    try:
        import kaleido
    except ImportError as exc:
        raise ImagesError("static images need kaleido 1.x: `pip install 'kaleido>=1.0'` "
                          "(or install labkit with the `images` extra)") from exc
    return kaleido


def _provenance(res) -> str:
    try:
        return provenance_line(res)
    except Exception:
        return ""


@dataclass(frozen=True)
class Chart:
    """One key chart: its file stem, its record and the suite's builder (``module:function``,
    given the Result, or ``data`` and ``subtitle`` when ``takes_data``)."""

    stem: str
    record: str
    builder: str
    takes_data: bool = False
    #: GPUs the record is measured on: its reference folder is ``<gpu>`` or ``<gpu>x<gpus>``
    gpus: int = 1

    def build(self, res) -> Any:
        import importlib

        mod, fn = self.builder.split(":")
        func = getattr(importlib.import_module(mod), fn)
        return func(res.record, subtitle=_provenance(res)) if self.takes_data else func(res)


#: (stem, record, builder in a labkit.teach topic module, takes_data, gpus) of the key charts, in
#: notebook order; ``{p}`` stands for each preset
_CHARTS = (
    ("01_launch_overhead", "launch_overhead", "launch:launch_overhead_bars", False, 1),
    ("01_launch_sweep", "launch_overhead", "launch:sweep_chart", False, 1),
    ("02_decode_step_{p}", "decode_{p}", "decode:step_time_chart", False, 1),
    ("03_timeline_{p}", "timeline_{p}", "launch:timeline_chart", False, 1),
    ("04_pool_memory_{p}", "pool_memory_{p}", "memory:pool_totals", True, 1),
    ("05_dispatcher_{p}", "dispatcher_{p}", "sizing:step_times", True, 1),
    ("08_compile_{p}", "compile_{p}", "compile:step_time_bars", False, 1),
    ("11_paged_gpt2", "paged_gpt2", "paged:speed_chart", True, 1),
    ("12_roofline_{p}", "roofline_{p}", "roofline:floor_chart", False, 1),
    ("13_serving_load_gpt2", "serving_load_gpt2", "serving:latency_load_chart", True, 1),
    ("14_tp_allreduce", "tp_allreduce", "tp:allreduce_chart", True, 2),
    ("14_tp_decode_gpt2", "tp_decode_gpt2", "tp:tp_step_chart", True, 2),
    ("14_tp_comm_gpt2", "tp_decode_gpt2", "tp:comm_split_chart", True, 2),
    ("17_past_launch_{p}", "past_launch_{p}", "past_launch:ways_chart", False, 1),
    ("18_breakable_{p}", "breakable_{p}", "engines2026:breakable_chart", False, 1),
    ("18_graph_estimate_{p}", "graph_memory_{p}", "engines2026:estimate_chart", False, 1),
)


def key_charts(presets: Sequence[str] = ("small", "gpt2")) -> list[Chart]:
    """The suite's key charts, in notebook order."""
    return [Chart(stem.format(p=p), record.format(p=p), f"labkit.teach.{builder}",
                  takes_data, gpus)
            for stem, record, builder, takes_data, gpus in _CHARTS
            for p in (presets if "{p}" in stem else ("",))]


def export_images(out_dir: Path = Path("build/images"), fmt: str = "png", *,
                  gpu: str = "h200") -> list[Path]:
    """Write ``<out_dir>/<stem>.<fmt>`` for every key chart whose reference record exists
    (the others are listed on stderr); returns the files written."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    browser = find_browser()
    kaleido = _kaleido()
    register_template()
    todo, missing = [], []
    cache: dict[str, Any] = {}
    for ch in key_charts():
        folder = gpu if ch.gpus == 1 else f"{gpu_slug(gpu)}x{ch.gpus}"
        key = f"{folder}/{ch.record}"
        if key not in cache:
            try:
                cache[key] = load_reference(ch.record, gpu=folder)
            except FileNotFoundError:
                cache[key] = None
        if cache[key] is None:
            missing.append(ch.record if ch.gpus == 1 else key)
        else:
            todo.append((ch, cache[key]))
    if missing:
        print(f"labkit images: no reference record for {', '.join(sorted(set(missing)))} in "
              f"{reference_dir(gpu)}: those charts are skipped", file=sys.stderr)
    if not todo:
        raise ImagesError(f"no reference records to draw in {reference_dir(gpu)}: record them on "
                          "a GPU (`labkit run`, then `labkit reference`)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    scale = PNG_SCALE if fmt == "png" else 1
    kaleido.start_sync_server(path=browser, mathjax=False, silence_warnings=True)
    try:
        for ch, res in todo:
            fig = ch.build(res)
            data = kaleido.calc_fig_sync(fig, opts=dict(format=fmt, width=WIDTH, height=HEIGHT,
                                                        scale=scale))
            target = out_dir / f"{ch.stem}.{fmt}"
            target.write_bytes(data)
            written.append(target)
    finally:
        kaleido.stop_sync_server(silence_warnings=True)
    return written
