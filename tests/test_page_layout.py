"""Tables and charts as a run page shows them, measured in headless Chromium (offline):

(a) no table cell's text is clipped (an HTML cell's content fits its box; a plotly table cell's
    text lies inside its cell),
(b) no figure has more than :data:`MAX_BLANK_PX` of blank space below its content,
(c) no legend overlaps an x axis's title or tick labels (nor the figure's title).

The page is a small notebook whose outputs are what the kernel shows for the builders'
figures and tables (the same display formatter), exported by the run's own page exporter
(``labkit.suite.report.export_notebook_html``). A script appended to the page measures every
chart at the page's height, then again with every chart shrunk as the deck shrinks a chart to
fit a slide (down to ``MIN_CHART_HEIGHT``), and writes what it measured into the DOM, which
``--dump-dom`` returns. ``python tests/test_page_layout.py`` prints the measurements.
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = pytest.mark.browser

#: The most blank space (px) a figure may leave below its content.
MAX_BLANK_PX = 60
#: The measurements: each chart at the page's height, then shrunk to the least height a slide
#: gives a chart (the deck relayouts a chart that does not fit down to MIN_CHART_HEIGHT).
SIZES = ("page", "shrunk")

_MEASURE_JS = r"""
<script>
(function () {
  function box(el) { var r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
  function visible(el) {
    var r = el.getBoundingClientRect();
    if (r.width < 0.5 || r.height < 0.5) { return false; }
    var s = window.getComputedStyle(el);
    return s.display !== 'none' && s.visibility !== 'hidden' && s.opacity !== '0';
  }
  function overlap(a, b) {
    var w = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
    var h = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
    return (w > 1 && h > 1) ? w * h : 0;
  }
  function label(el) {
    var cap = el.querySelector('caption, .gtitle');
    return ((cap || el).textContent || '').trim().replace(/\s+/g, ' ').slice(0, 70);
  }
  function measure() {
    var out = {tables: [], figures: []};
    // HTML tables: every cell's content fits its box
    document.querySelectorAll('.jp-OutputArea-output table').forEach(function (t) {
      var clipped = [];
      t.querySelectorAll('th, td').forEach(function (c) {
        if (c.scrollHeight > c.clientHeight + 1 || c.scrollWidth > c.clientWidth + 1) {
          clipped.push(c.textContent.trim().slice(0, 40));
        }
      });
      var wrap = t.closest('.jp-OutputArea-output');
      out.tables.push({kind: 'html', label: label(t), cells: t.querySelectorAll('td, th').length,
                       clipped: clipped, blank: box(wrap)[3] - box(t)[3]});
    });
    document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
      var fig = {label: label(gd), height: gd.getBoundingClientRect().height, clipped: [],
                 overlaps: [], table: !!gd.querySelector('.table')};
      // (a) plotly tables: each cell's text inside its cell's rectangle
      gd.querySelectorAll('.table .column-cell').forEach(function (cell) {
        var rect = cell.querySelector('.cell-rect'), text = cell.querySelector('.cell-text');
        if (!rect || !text || !text.textContent.trim()) { return; }
        var r = box(rect), t = box(text);
        if (t[1] < r[1] - 0.5 || t[3] > r[3] + 0.5) {
          fig.clipped.push(text.textContent.trim().slice(0, 40));
        }
      });
      // (b) blank space: the figure's bottom below the lowest thing drawn
      // (data marks are clipped to their plot area: a bar from 0 on a log axis reaches far below)
      var bottom = -Infinity, top = box(gd)[1], plots = (gd._fullLayout || {})._plots || {};
      var areaBottom = -Infinity;
      Object.keys(plots).forEach(function (k) {
        var ya = plots[k].yaxis;
        if (ya) { areaBottom = Math.max(areaBottom, top + ya._offset + ya._length); }
      });
      gd.querySelectorAll('.main-svg *').forEach(function (el) {
        if (el.children.length || el.matches('rect.bg, .draglayer *, .hoverlayer *, defs *, clipPath *, .scroll-background, .legendtoggle, .scrollbar *')) { return; }
        if (!/^(text|path|rect|line|circle|tspan|image|polygon)$/.test(el.tagName)) { return; }
        if (el.tagName === 'text' && !el.textContent.trim()) { return; }
        if (el.tagName === 'path' && !(el.getAttribute('d') || '').replace(/[MZ0-9.,\s-]/g, '')) { return; }
        if (!visible(el)) { return; }
        var b = box(el)[3];
        if (el.closest('.overplot') && areaBottom > -Infinity) { b = Math.min(b, areaBottom); }
        if (b > bottom) {
          bottom = b;
          fig.lowest = el.tagName + '.' + (el.getAttribute('class') || el.parentNode.getAttribute('class'));
        }
      });
      fig.blank = box(gd)[3] - bottom;
      // (c) the legend against x-axis titles, tick labels and the title
      var legend = gd.querySelector('.legend');
      if (legend && visible(legend)) {
        var lb = box(legend.querySelector('.bg') || legend);
        gd.querySelectorAll('[class^="xtitle"], [class*=" xtitle"], .xtick text, .gtitle')
          .forEach(function (el) {
            if (!visible(el) || !el.textContent.trim()) { return; }
            var a = overlap(lb, box(el));
            if (a > 0) { fig.overlaps.push(el.textContent.trim().slice(0, 40)); }
          });
      }
      out.figures.push(fig);
    });
    return out;
  }
  // at the page's chart height, then with every chart shrunk as a slide shrinks it
  function run() {
    var got = {page: measure()}, gds = document.querySelectorAll('.js-plotly-plot');
    Promise.all(Array.prototype.map.call(gds, function (gd) {  // as the deck's fitCharts does
      gd.style.height = SHRUNK + 'px';
      gd.style.overflow = 'hidden';
      return window.Plotly.relayout(gd, {height: SHRUNK});
    })).then(function () {
      setTimeout(function () {
        got.shrunk = measure();
        var pre = document.createElement('pre');
        pre.id = 'labkit-layout';
        pre.textContent = JSON.stringify(got);
        document.body.appendChild(pre);
      }, 300);
    });
  }
  var tries = 0;
  var t = setInterval(function () {
    var divs = document.querySelectorAll('.plotly-graph-div');
    var drawn = document.querySelectorAll('.plotly-graph-div .main-svg');
    tries += 1;
    if ((drawn.length && drawn.length >= divs.length) || !divs.length || tries > 100) {
      clearInterval(t);
      setTimeout(run, 300);
    }
  }, 100);
})();
</script>
"""


def chromium() -> str:
    for path in (os.environ.get("BROWSER_PATH"), "/usr/bin/chromium"):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip("Chromium not installed (apt-get install chromium)")


def measure_page(page: Path, size: str = "1100,900") -> dict:
    """What :data:`_MEASURE_JS` measured on ``page`` (a copy with the script appended):
    ``{"page": ..., "shrunk": ...}``, each ``{"tables": [...], "figures": [...]}``."""
    from labkit.suite.slides.exporters import MIN_CHART_HEIGHT

    probe = page.with_name(page.stem + ".measure.html")
    script = _MEASURE_JS.replace("SHRUNK", str(MIN_CHART_HEIGHT))
    probe.write_text(page.read_text(encoding="utf-8").replace("</html>", script + "</html>"),
                     encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="labkit-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile}",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={size}",
               "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="labkit-layout">(.*?)</pre>', proc.stdout, re.S)
    assert m, "the page did not finish measuring: " + proc.stderr[-2000:]
    return json.loads(htmllib.unescape(m.group(1)))


def display_bundle(obj: Any) -> dict:
    """The output a kernel shows for ``obj`` (IPython's display formatter; plotly figures
    through the run's renderer, ``plotly_mimetype``)."""
    import plotly.io as pio
    from plotly.basedatatypes import BaseFigure

    if isinstance(obj, BaseFigure):
        return pio.renderers["plotly_mimetype"].to_mimebundle(obj.to_dict())
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(obj)
    return data


def _stats(m: float) -> dict:
    return {"median": m, "p10": 0.9 * m, "p90": 1.1 * m, "mean": m, "n": 5, "unit": "us"}


def page_items() -> list[tuple[str, Any]]:
    """``(heading, figure or table)`` of the page: tables with underscores, descenders, long
    text, missing values and unrounded numbers; the suite's key charts from the reference
    records; notebook 12's charts (the stacked bytes bars, the floor and N-step charts)."""
    from labkit.measure.results import load_reference
    from labkit.model import preset
    from labkit.suite import images
    from labkit.teach import roofline as lr
    from labkit.teach.plots import bars, table
    from labkit.teach import roofline as pr

    items: list[tuple[str, Any]] = [
        ("kernel table", table(
            [{"kernel": "addmm_", "op": "native_layer_norm", "µs": 12.3456789, "GB/s": None},
             {"kernel": "aten::_scaled_dot_product_flash_attention_for_cpu", "op": "gjpqy_",
              "µs": 1234.5678, "GB/s": 2891.07},
             {"kernel": "total", "op": "", "µs": 0.000123456, "GB/s": float("nan")}],
            title="Kernels, typing: gjpqy_ (underscores and descenders)")),
        ("long text", table(
            [{"claim": "CUDA graphs give a 2-5x decode speed-up " * 3,
              "as quoted": '"' + "replay removes the CPU launch overhead of every kernel " * 2
                           + '"', "verdict": "holds at batch 1, not at batch 64"}] * 4,
            title="Claims and what answers them")),
        ("one row", table([{"batch": 1, "eager µs": 680.25, "graph µs": 619.0}])),
    ]
    rows = [{"batch": b, "median µs": 100.0 + 7.3 * b, "p10–p90": f"{90 + b} – {120 + b}",
             "verdict": "no difference" if b % 2 else "graph_faster"} for b in range(1, 17)]
    items.append(("sixteen rows", table(rows, title="Sixteen rows")))
    for ch in images.key_charts():
        folder = "h200" if ch.gpus == 1 else f"h200x{ch.gpus}"
        try:
            res = load_reference(ch.record, gpu=folder)
        except FileNotFoundError:
            continue
        items.append((ch.stem, ch.build(res)))
    cfg = preset("gpt2", dtype="bfloat16")
    brows = lr.bytes_rows(cfg, [1, 8, 64], 256)
    kinds = ("weights (MB)", "KV read (MB)", "logits + KV write + embeddings (MB)")
    items.append(("bytes per step", bars(
        [1, 8, 64], {k.replace(" (MB)", ""): [r[k] for r in brows] for k in kinds},
        x_title="batch size", y_title="MB per step", title="Bytes one gpt2 decode step moves"
        ).update_layout(barmode="stack")))
    items.append(("bytes table", table(brows, title="gpt2 (12 x 768, bf16)")))
    for name in ("multistep_gpt2", "multistep_small"):
        rec = load_reference(name)
        items.append((name, pr.multistep_chart(rec)))
        items.append((name + " rows", table(lr.multistep_rows(rec), title=name)))
    rec = load_reference("roofline_gpt2")
    items.append(("floor rows", table(lr.floor_rows(rec, ["eager", "graph"]), title="floor")))
    # the other builders with a legend or a log axis
    from labkit.teach.claims import CLAIMED_SPEEDUP
    from labkit.teach import claims
    from labkit.teach import compile as pc
    from labkit.teach import sizing as dispatch
    from labkit.teach import memory
    from labkit.teach import modes
    from labkit.teach import serving
    from labkit.teach import sizing as sizes

    decode = {n: load_reference(n) for n in ("decode_small", "decode_gpt2")}
    items.append(("claims", claims.speedup_vs_claim(decode, CLAIMED_SPEEDUP)))
    items.append(("modes", modes.step_time_bars(load_reference("modes_gpt2"), log_y=True)))
    items.append(("compile total", pc.total_time_chart(load_reference("compile_small"), 1)))
    items.append(("pool growth", memory.pool_growth(load_reference("pool_memory_gpt2").record,
                                                    subtitle="prov")))
    items.append(("padding table", dispatch.padding_table_chart([0, 1, 2, 4, 4, 8, 8, 8, 8, 0])))
    items.append(("hit and waste", dispatch.hit_waste(
        {"a": {"hit_rate": 0.9, "waste": 0.2}, "b": {"hit_rate": 0.5, "waste": 0.05}})))
    serve = {n: load_reference(n) for n in ("serve_eager", "serve_full", "serve_piecewise")}
    items.append(("serving runs", serving.runs_chart(serve, subtitle="prov")))
    mon = {n: load_reference(n) for n in ("serve_full", "serve_capped", "serve_breaker")}
    items.append(("monitoring", serving.monitoring_chart(mon, subtitle="prov")))
    items.append(("trace sizes", sizes.trace_histogram(
        {1: 0.3, 2: 0.2, 5: 0.1, 17: 0.4}, {"powers of 2": [1, 2, 4, 8, 16, 32],
                                            "every 8": [8, 16, 24, 32]}, subtitle="prov")))
    return items


def build_page(items: list[tuple[str, Any]], out: Path) -> Path:
    """A notebook showing ``items``, exported as a run page."""
    from labkit.suite import report

    nb = nbformat.v4.new_notebook()
    for i, (heading, obj) in enumerate(items):
        nb.cells.append(nbformat.v4.new_markdown_cell(f"## {heading}", id=f"h{i}"))
        cell = nbformat.v4.new_code_cell("show()", id=f"c{i}", execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("display_data", data=display_bundle(obj))]
        nb.cells.append(cell)
    src = out / "layout.ipynb"
    nbformat.write(nb, str(src))
    return report.export_notebook_html(src, out / "layout.html")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict]:
    chromium()
    return measure_page(build_page(page_items(), tmp_path_factory.mktemp("page-layout")))


def report_lines(got: dict) -> list[str]:
    lines = []
    for t in got["tables"]:
        lines.append(f"html table {t['label'][:40]!r}: {len(t['clipped'])}/{t['cells']} cells "
                     f"clipped, {t['blank']:.0f} px blank")
    for f in got["figures"]:
        lines.append(f"{'table' if f['table'] else 'chart'} {f['label'][:40]!r}: "
                     f"height {f['height']:.0f}, {f['blank']:.0f} px blank, "
                     f"{len(f['clipped'])} cells clipped, legend over {f['overlaps']} lowest {f.get('lowest')}")
    return lines


@pytest.mark.parametrize("size", SIZES)
def test_no_table_text_is_clipped(measured, size):
    got = measured[size]
    assert got["tables"] or any(f["table"] for f in got["figures"]), "no table measured"
    clipped = [(t["label"], t["clipped"]) for t in got["tables"] if t["clipped"]]
    clipped += [(f["label"], f["clipped"]) for f in got["figures"] if f["clipped"]]
    assert not clipped, f"clipped table text: {clipped}"


@pytest.mark.parametrize("size", SIZES)
def test_no_figure_leaves_blank_space_below(measured, size):
    got = measured[size]
    assert len(got["figures"]) >= 10, "the charts were not drawn"
    blank = [(f["label"], round(f["blank"])) for f in got["figures"] if f["blank"] > MAX_BLANK_PX]
    blank += [(t["label"], round(t["blank"])) for t in got["tables"] if t["blank"] > MAX_BLANK_PX]
    assert not blank, f"more than {MAX_BLANK_PX} px blank below: {blank}"


@pytest.mark.parametrize("size", SIZES)
def test_no_legend_covers_an_axis(measured, size):
    got = measured[size]
    over = [(f["label"], f["overlaps"]) for f in got["figures"] if f["overlaps"]]
    assert not over, f"legends over axis titles, tick labels or titles: {over}"


if __name__ == "__main__":  # print the measurements: python tests/test_page_layout.py
    here = Path(tempfile.mkdtemp(prefix="labkit-layout-"))
    page = build_page(page_items(), here)
    print(page)
    for size, got in measure_page(page).items():
        print(f"--- {size}")
        print("\n".join(report_lines(got)))
