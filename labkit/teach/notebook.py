"""Notebook plumbing: the set-up cell, the tier banner, live-or-recorded results."""

from __future__ import annotations

import html
import platform
import re
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Sequence

from labkit import __version__

from labkit.support import envvars
from labkit.support.env import hardware_tier
from labkit.measure import recorder
from labkit.measure.records import default_params
from labkit.measure.results import load_reference, load_result, provenance_line, save_result
from labkit.teach import answers, statements
from labkit.teach.plots import register_template


@dataclass
class NotebookContext:
    """What a notebook needs to know about where it runs."""

    name: str
    tier: str
    reference_gpu: str
    #: GPUs the notebook's live measurements need (2 for tensor parallelism), and present
    gpus_needed: int = 1
    gpus_here: int = 0

    @property
    def live(self) -> bool:
        """True when CUDA measurements run live here (with as many GPUs as they need)."""
        return self.tier == "gpu" and self.gpus_here >= self.gpus_needed

    @property
    def too_few_gpus(self) -> bool:
        """A GPU machine with fewer GPUs than the notebook needs (it then shows references)."""
        return self.tier == "gpu" and self.gpus_here < self.gpus_needed

    def state(self, statement: str, holds: Any, shows: Any = "", *, about: Any = None) -> bool:
        """A statement check, recorded as the record(s) ``about`` say, else by the tier."""
        recorded = statements.is_reference(about)
        return statements.check(statement, holds, shows,
                                recorded=not self.live if recorded is None else recorded)

    def check(self, number: str, /, **answers_and_context: Any) -> None:
        """Run exercise ``number``'s checks (registered in :mod:`labkit.teach.answers`) on the
        learner's answers; prints PASS/TODO lines and a count (strict mode: raises)."""
        head = self.name.split("_", 1)[0]
        answers.run(number, int(head) if head.isdigit() else None, **answers_and_context)

    @staticmethod
    def spell(value: Any) -> str:
        """A record's checks or counts for prose (:func:`labkit.teach.statements.spell`)."""
        return statements.spell(value)

    @staticmethod
    def say(template: str, /, **values: Any) -> None:
        """Markdown with numbers from a record filled in (:func:`labkit.teach.statements.say`)."""
        statements.say(template, **values)


def configure_plotly() -> str:
    """Pick a plotly renderer that draws in JupyterLab and offline exports."""
    import plotly.io as pio

    renderer = envvars.plotly_renderer()
    pio.renderers.default = renderer
    register_template()
    return renderer


def reference_folder(gpus: int = 1, gpu: str = "h200") -> str:
    """The ``data/reference/`` folder of ``gpus`` GPUs of one kind: ``h200``, ``h200x2``."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a positive int, got {gpus!r}")
    return gpu if gpus == 1 else f"{gpu}x{gpus}"


def banner_html(ctx: NotebookContext, gpu_name: str | None) -> str:
    color = "#a35a00"
    if ctx.too_few_gpus:
        msg = (f"<b>Too few GPUs for the live tier</b>: this notebook measures on "
               f"{ctx.gpus_needed} GPUs and this machine has {ctx.gpus_here}. Its CUDA "
               "measurements are shown from recorded reference results "
               f"(<code>data/reference/{html.escape(ctx.reference_gpu)}/</code>); run it on a "
               f"machine with {ctx.gpus_needed} GPUs to measure live.")
    elif ctx.live:
        msg = (f"<b>Live tier</b>: measurements run on this machine's GPU "
               f"(<code>{html.escape(gpu_name or 'CUDA device')}</code>).")
        color = "#1b7f3b"
    else:
        msg = ("<b>CPU tier</b>: no CUDA GPU here. Eager decode, dispatcher bucketing and size "
               "choice run live on the CPU; every CUDA measurement is shown from recorded "
               f"reference results (<code>data/reference/{html.escape(ctx.reference_gpu)}/</code>"
               "; a record it lacks comes from another GPU's folder where one holds it), "
               "labelled with the GPU, torch version and date they came from.")
    return (f'<div style="border-left:6px solid {color};padding:6px 12px;'
            f'background:#f7f7f7">{msg}</div>')


def setup(name: str, *, gpus: int = 1, quiet: bool = False) -> NotebookContext:
    """Set-up cell: versions, tier banner, plotly renderer; returns the context."""
    import torch

    reference_gpu = reference_folder(gpus)  # checks gpus
    threads = envvars.cpu_threads()
    if threads:  # CI and small shared machines: one thread is far faster for a tiny model
        torch.set_num_threads(threads)
    tier = hardware_tier()
    here = torch.cuda.device_count() if tier == "gpu" else 0
    ctx = NotebookContext(name, tier, reference_gpu, gpus_needed=gpus, gpus_here=here)
    configure_plotly()
    if not quiet:
        gpu = torch.cuda.get_device_name(0) if tier == "gpu" else None
        print(f"labkit {__version__} | torch {torch.__version__} | "
              f"python {platform.python_version()} | tier: {tier}"
              + (f" | GPU: {gpu}" if gpu else ""))
        banner = banner_html(ctx, gpu)
        statements.show(banner, re.sub("<[^>]+>", "", banner))
    return ctx


def measure_or_reference(ctx: NotebookContext, name: str, measure: Callable[[], dict],
                         params: dict | None = None, *, show: bool = True):
    """Live: run ``measure()`` and save it as ``name``; else the recorded reference."""
    if ctx.live:
        res = load_result(save_result(name, measure(), params or {}))
        label = "measured live"
    else:
        res = load_reference_for(ctx, name)
        label = "RECORDED REFERENCE (not measured on this machine)"
    if show:
        _provenance_note(label, res)
    return res


def record_or_reference(ctx: NotebookContext, name: str, *, show: bool = True,
                        **overrides: Any) -> Any:
    """Live: measure record ``name`` by its recipe (:mod:`labkit.measure.recorder`) with
    ``overrides`` and save it; else the recorded reference."""
    params = default_params(name, **overrides)  # a bad name or override fails here, not live
    return measure_or_reference(ctx, name, lambda: recorder.measure(name, **overrides)[0],
                                params, show=show)


def _provenance_note(label: str, res: Any) -> None:
    line = f"{label}: {provenance_line(res)}"
    statements.show(f'<div style="font-size:90%;color:#555">{html.escape(line)}</div>', line)


#: where a notebook looks when its reference GPU has no record of a name: another GPU's folder
#: (each file names the GPU it was measured on, and the provenance line shows it)
FALLBACK_GPUS: dict[str, tuple[str, ...]] = {"h200": ("h100-80gb-hbm3",)}


def reference_gpus(ctx: NotebookContext) -> tuple[str, ...]:
    """The folders a notebook reads references from, in order: its reference GPU's, then
    :data:`FALLBACK_GPUS`."""
    return (ctx.reference_gpu, *FALLBACK_GPUS.get(ctx.reference_gpu, ()))


def load_reference_for(ctx: NotebookContext, name: str) -> Any:
    """The reference ``name`` from ``ctx.reference_gpu``'s folder, else from the first of
    :data:`FALLBACK_GPUS` that holds it (its provenance names that GPU); raises
    ``FileNotFoundError`` (naming the reference GPU's folder) when none does."""
    try:
        return load_reference(name, gpu=ctx.reference_gpu)
    except FileNotFoundError as missing:
        for gpu in reference_gpus(ctx)[1:]:
            try:
                return load_reference(name, gpu=gpu)
            except FileNotFoundError:
                continue
        raise missing


def reference_or_none(ctx: NotebookContext, name: str) -> Any:
    """The recorded reference ``name`` (:func:`load_reference_for`) or ``None`` if it has not
    been recorded."""
    try:
        return load_reference_for(ctx, name)
    except FileNotFoundError:
        return None


def reference_holding(ctx: NotebookContext, name: str, key: str) -> Any:
    """The first recorded reference ``name`` whose data holds ``key``, from the reference GPU's
    folder, then :data:`FALLBACK_GPUS` (a field recorded since, such as ``host_times``, may be
    on another GPU only: its provenance line names that GPU), or ``None``."""
    for gpu in reference_gpus(ctx):
        try:
            found = load_reference(name, gpu=gpu)
        except FileNotFoundError:
            continue
        if key in found.data:
            return found
    return None


def measure_many_or_reference(ctx: NotebookContext, names: Sequence[str],
                              measure: Callable[[], dict[str, dict]],
                              params: dict | None = None) -> dict[str, Any]:
    """Several records of one ``measure()`` (name -> data) when live, else references or None."""
    names = list(names)
    if not ctx.live:
        return {n: reference_or_none(ctx, n) for n in names}
    got = measure()
    if missing := [n for n in names if n not in got]:
        raise KeyError(f"the measurement returned no record {missing}; it returned "
                       f"{sorted(got)}")
    out = {n: load_result(save_result(n, got[n], params or {})) for n in names}
    for n, res in out.items():
        _provenance_note(f"measured live: {n}", res)
    return out
