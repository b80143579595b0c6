"""Notebook plumbing: the set-up cell, the hardware-tier banner, live-or-recorded results.

Every notebook starts with ``nb = labkit.teach.notebook.setup("03_capture_replay")`` and gets
the tier (``gpu`` runs measurements live; ``cpu`` shows recorded GPU reference results,
labelled with where they came from). Nothing here measures anything itself.
"""

from __future__ import annotations

import html
import platform
from dataclasses import dataclass
from typing import Any, Callable

from labkit import __version__, envvars
from labkit.env import hardware_tier
from labkit.measure.results import load_reference, load_result, provenance_line, save_result
from labkit.teach.plots import register_template


@dataclass
class NotebookContext:
    """What a notebook needs to know about where it runs."""

    name: str
    tier: str
    reference_gpu: str
    device: str

    @property
    def live(self) -> bool:
        """True when CUDA measurements run live here."""
        return self.tier == "gpu"


def configure_plotly() -> str:
    """Pick a plotly renderer that draws in JupyterLab *and* in HTML/slide exports offline.

    ``plotly_mimetype+notebook`` embeds plotly.js once per notebook, so exported decks and
    HTML pages show the charts with no network. ``PLOTLY_RENDERER`` overrides it.
    """
    import plotly.io as pio

    renderer = envvars.plotly_renderer()
    pio.renderers.default = renderer

    register_template()
    return renderer


def _display_html(text: str) -> None:
    try:
        from IPython.display import HTML, display

        display(HTML(text))
    except ImportError:  # plain python: print the text content
        print(text)


def banner_html(ctx: NotebookContext, gpu_name: str | None) -> str:
    if ctx.live:
        msg = (f"<b>Live tier</b>: measurements run on this machine's GPU "
               f"(<code>{html.escape(gpu_name or 'CUDA device')}</code>).")
        color = "#1b7f3b"
    else:
        msg = ("<b>CPU tier</b>: no CUDA GPU here. Eager decode, dispatcher bucketing and size "
               "choice run live on the CPU; every CUDA measurement is shown from recorded "
               f"reference results (<code>data/reference/{html.escape(ctx.reference_gpu)}/</code>"
               "), labelled with the GPU, torch version and date they came from.")
        color = "#a35a00"
    return (f'<div style="border-left:6px solid {color};padding:6px 12px;'
            f'background:#f7f7f7">{msg}</div>')


def setup(name: str, *, reference_gpu: str = "h200", quiet: bool = False) -> NotebookContext:
    """Set-up cell: versions, tier banner, plotly renderer. Returns the context."""
    import torch


    threads = envvars.cpu_threads()
    if threads:  # CI and small shared machines: one thread is far faster for a tiny model
        torch.set_num_threads(threads)
    tier = hardware_tier()
    ctx = NotebookContext(name, tier, reference_gpu, "cuda" if tier == "gpu" else "cpu")
    configure_plotly()
    if not quiet:
        gpu = torch.cuda.get_device_name(0) if tier == "gpu" else None
        print(f"labkit {__version__} | torch {torch.__version__} | "
              f"python {platform.python_version()} | tier: {tier}"
              + (f" | GPU: {gpu}" if gpu else ""))
        _display_html(banner_html(ctx, gpu))
    return ctx


def measure_or_reference(ctx: NotebookContext, name: str, measure: Callable[[], dict],
                         params: dict | None = None, *, show: bool = True):
    """On the GPU tier run ``measure()``, save it as result ``name`` and return it;
    on the CPU tier load the recorded reference ``name`` instead. Either way the returned
    :class:`labkit.measure.results.Result` says where its numbers came from."""

    if ctx.live:
        data = measure()
        res = load_result(save_result(name, data, params or {}))
        label = "measured live"
    else:
        res = load_reference(name, gpu=ctx.reference_gpu)
        label = "RECORDED REFERENCE (not measured on this machine)"
    if show:
        _display_html(f'<div style="font-size:90%;color:#555">{label}: '
                      f"{html.escape(provenance_line(res))}</div>")
    return res


def reference_or_none(ctx: NotebookContext, name: str) -> Any:
    """The recorded reference ``name`` or ``None`` if it has not been recorded."""

    try:
        return load_reference(name, gpu=ctx.reference_gpu)
    except FileNotFoundError:
        return None
