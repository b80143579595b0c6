"""HTML pages for ``labkit run``: the run's and the sweep's ``index.html`` (self-contained,
offline) and the HTML export of each executed notebook.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any
from collections.abc import Iterable
from labkit.support.env import format_record
from labkit.measure.results import load_reference, load_result, provenance_line
from labkit.suite import links, slides

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.6em;
border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #1b7f3b; font-weight: 600; }
.failed, .interrupted { color: #b00020; font-weight: 600; }
.skipped, .pending, .running { color: #888; font-weight: 600; }
.err { color: #b00020; font-family: ui-monospace, monospace; font-size: 0.9em;
       white-space: pre-wrap; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.88em; }
code { font-size: 0.92em; } .muted { color: #777; }
"""


def format_duration(seconds: float | None) -> str:
    """``'4.2 s'``, ``'3 min 05 s'``, ``'1 h 02 min'``; ``'-'`` for None."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )


def _table(header: Iterable[str], rows: Iterable[Iterable[str]],
           num_cols: set[int] | frozenset[int] = frozenset()) -> str:
    """An HTML table; cells are already-escaped HTML."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in num_cols else f"<td>{c}</td>"
            for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


#: an empty cell
_NONE = '<span class="muted">-</span>'


def _status(status: str | None) -> str:
    s = status or "unknown"
    return f'<span class="{_e(s)}">{_e(s)}</span>'


def _duration(seconds: float | None) -> str:
    return _e(format_duration(seconds))


def _params_table(params: dict) -> str:
    return _table(["parameter", "value"],
                  [[f"<code>{_e(k)}</code>", _value(v)] for k, v in params.items()])


def _value(v: Any) -> str:
    """A parameter or result value, compactly."""
    if isinstance(v, float):
        return _e(_fmt_num(v))
    if isinstance(v, (dict, list)):
        return f"<code>{_e(json.dumps(v))}</code>"
    return f"<code>{_e(repr(v) if isinstance(v, str) else v)}</code>"


def _fmt_num(x: float | int) -> str:
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}" if abs(x) >= 10000 else str(x)
    if x == 0 or not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def export_notebook_html(notebook: Path, out_html: Path, *,
                         notes: list[str] | None = None) -> Path:
    """Export an executed notebook to an offline HTML page as ``labkit slides`` does; returns its
    path. Without a local MathJax TeX is shown as written (``notes`` says so); a page that would
    load anything from the network raises :class:`~labkit.suite.slides.RemoteAssetError`."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    nb, info = slides.prepare_notebook(nb, drop_tags=())
    out_html = Path(out_html)
    mathjax_url: str | None = slides.LOCAL_URLS["mathjax_url"]
    parts = slides.page_asset_parts(info)
    if "mathjax" in parts:  # never fetched here: a run does not reach the network for its pages
        try:
            slides.ensure_web_assets(fetch=False, parts=["mathjax"])
        except slides.SlidesError:
            parts.remove("mathjax")
            mathjax_url = None
            if notes is not None:
                notes.append(f"{Path(notebook).stem}: TeX shown as written (no local MathJax; "
                             "`bash scripts/fetch_web_assets.sh` fetches it)")
    _, exporter = slides.make_exporters()
    body, _ = exporter.from_notebook_node(nb, resources={
        "metadata": {"name": Path(notebook).stem, "path": str(Path(notebook).parent)},
        "labkit_head": slides.head_html(info, mathjax_url=mathjax_url)})
    remote = slides.find_remote_urls(body, base_dir=out_html.parent)
    if remote:
        raise slides.RemoteAssetError(f"the HTML page of {notebook} would load these from the "
                                      "network (not offline): " + ", ".join(remote))
    if parts:
        slides.copy_assets(out_html.parent, parts=parts)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(body, encoding="utf-8")
    return out_html


#: What a run page says beside a notebook link whose notebook the run does not hold.
NOT_IN_RUN = "not in this run"


def relink_run_pages(run_dir: Path) -> int:
    """Point every notebook link of a run's pages (``html/*.html``) at that notebook's run page
    (else its executed copy; else plain text saying it is not in this run); returns how many
    links changed."""
    html_dir = Path(run_dir) / "html"
    return sum(links.relink_page(p, links.run_page_candidates, missing=NOT_IN_RUN)
               for p in sorted(html_dir.glob("*.html")))


def _is_stats(obj: Any) -> bool:
    return (isinstance(obj, dict) and "median" in obj
            and isinstance(obj.get("median"), (int, float))
            and not isinstance(obj.get("median"), bool))


def headline_numbers(data: Any, max_depth: int = 3, max_list: int = 4) -> dict[str, float]:
    """A result's ``data`` flattened into ``{path: number}``: plain numbers, a Stats dict's
    median (``path.median [unit]``), short lists' items (``path[i]``), down to ``max_depth``."""
    out: dict[str, float] = {}

    def walk(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, bool) or obj is None:
            return
        if isinstance(obj, (int, float)):
            if path and (not isinstance(obj, float) or math.isfinite(obj)):
                out[path] = obj
            return
        if depth >= max_depth:
            return
        if _is_stats(obj):
            unit = obj.get("unit")
            out[f"{path}.median" + (f" [{unit}]" if unit else "")] = obj["median"]
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("n", "repeats", "n_kernels"):  # sample counts, not measurements
                    continue
                walk(v, f"{path}.{k}" if path else str(k), depth + 1)
        elif isinstance(obj, list) and len(obj) <= max_list:
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]", depth + 1)

    walk(data, "", 0)
    return out


def compare_with_reference(data: dict, ref_data: dict,
                           limit: int = 6) -> list[tuple[str, float, float]]:
    """``(path, run value, reference value)`` for up to ``limit`` headline numbers both share."""
    mine = headline_numbers(data)
    ref = headline_numbers(ref_data)
    return [(k, mine[k], ref[k]) for k in mine if k in ref][:limit]


def _load_results(run_dir: Path) -> list[tuple[Path, Any, str | None]]:
    """``(path, Result or None, error)`` for every ``results/*.json`` of a run."""
    folder = run_dir / "results"
    out: list[tuple[Path, Any, str | None]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append((path, load_result(path), None))
        except Exception as exc:
            out.append((path, None, f"{type(exc).__name__}: {exc}"))
    return out


def _link(href: str | None, text: str) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>' if href else _NONE


def _notebooks_section(record: dict) -> str:
    rows = []
    for i, nb in enumerate(record.get("notebooks", []), 1):
        params = nb.get("parameters") or {}
        ptext = "<br>".join(f"<code>{_e(k)}</code> = {_value(v)}" for k, v in params.items()) \
            or '<span class="muted">defaults</span>'
        links = " · ".join([_link(nb.get("html"), "HTML"), _link(nb.get("output"), "ipynb"),
                            _link(nb.get("kernel_log"), "kernel log")])
        status = _status(nb.get("status"))
        err = nb.get("error") or {}
        if err:
            status += f'<div class="err">{_e(err.get("summary"))}</div>'
        if nb.get("html_error"):
            status += f'<div class="err">HTML export: {_e(nb["html_error"])}</div>'
        res = ", ".join(f'<a href="results/{_e(r)}.json">{_e(r)}</a>'
                        for r in nb.get("results") or []) or _NONE
        rows.append([str(i), f"<b>{_e(nb.get('name'))}</b>", status,
                     _duration(nb.get("duration_s")), ptext, res, links])
    return "<h2>Notebooks</h2>" + _table(
        ["#", "notebook", "status", "duration", "parameters", "results", "outputs"], rows, {3})


def _results_section(run_dir: Path, record: dict, reference_gpu: str) -> str:
    loaded = _load_results(run_dir)
    if not loaded:
        note = "No result records were saved in this run." + (
            " On the CPU tier the notebooks show recorded reference results instead of saving "
            "new ones." if record.get("tier") == "cpu" else "")
        return f'<h2>Results</h2><p class="muted">{_e(note)}</p>'
    producer = {r: nb.get("name") for nb in record.get("notebooks", [])
                for r in nb.get("results") or []}
    rows, comparisons = [], []
    for path, res, err in loaded:
        name = path.stem
        link = f'<a href="results/{_e(path.name)}">{_e(name)}</a>'
        if res is None:
            rows.append([link, _e(producer.get(name, "")), f'<span class="err">{_e(err)}</span>',
                         ""])
            continue
        heads = list(headline_numbers(res.data).items())[:4]
        htext = "<br>".join(f"<code>{_e(k)}</code>: {_e(_fmt_num(v))}" for k, v in heads) \
            or _NONE
        rows.append([link, _e(producer.get(name, "")), _e(provenance_line(res)), htext])
        try:
            ref = load_reference(name, gpu=reference_gpu)
        except Exception:  # no reference of that name (or an unreadable one)
            continue
        pairs = compare_with_reference(res.data, ref.data)
        if pairs:
            comparisons.append((name, provenance_line(ref), pairs))
    out = "<h2>Results</h2>" + _table(["record", "notebook", "provenance", "headline numbers"],
                                      rows)
    if comparisons:
        out += f"<h2>Compared with the {_e(reference_gpu)} reference</h2>"
        for name, prov, pairs in comparisons:
            crow = [[f"<code>{_e(k)}</code>", _e(_fmt_num(a)), _e(_fmt_num(b)),
                     _e(f"{a / b:.2f}×") if b else "-"] for k, a, b in pairs]
            out += (f"<p><b>{_e(name)}</b> <span class=\"muted\">reference: {_e(prov)}</span></p>"
                    + _table(["number", "this run", "reference", "ratio"], crow, {1, 2, 3}))
    return out


def _env_section(env: dict) -> str:
    try:
        text = format_record(env)
    except Exception:
        text = ""
    unknown = '<span class="muted">unknown</span>'
    rows = [[f"<code>{_e(k)}</code>", _value(v) if v is not None else unknown]
            for k, v in env.items()]
    return ("<h2>Environment</h2>" + (f"<pre>{_e(text)}</pre>" if text else "")
            + "<details><summary>all fields</summary>" + _table(["field", "value"], rows)
            + "</details>")


def render_run_index(run_dir: Path, record: dict, reference_gpu: str = "h200") -> str:
    """The HTML text of a run's ``index.html``."""
    run_dir = Path(run_dir)
    nbs = record.get("notebooks", [])
    n_ok = sum(nb.get("status") == "ok" for nb in nbs)
    title = f"labkit run {record.get('run', run_dir.name)}"
    sub = (f"{_status(record.get('status'))} · {n_ok}/{len(nbs)} notebooks ok · tier "
           f"<b>{_e(record.get('tier'))}</b> · started {_e(record.get('started'))} · "
           f"{_duration(record.get('duration_s'))}")
    parts = [f"<h1>{_e(title)}</h1>", f'<p class="sub">{sub}</p>']
    sweep = record.get("sweep")
    if sweep:
        combo = ", ".join(f"{k} = {v!r}" for k, v in (sweep.get("combination") or {}).items())
        parts.append(f'<p>Sweep run {_e(sweep.get("index"))} of {_e(sweep.get("of"))} '
                     f'(<a href="../{_e(sweep.get("sweep_dir"))}/index.html">sweep overview</a>): '
                     f"<code>{_e(combo)}</code></p>")
    params = record.get("params") or {}
    if params or record.get("param_file"):
        ptext = _params_table(params) if params else ""
        if record.get("param_file"):
            ptext += f'<p class="muted">parameter file: <code>{_e(record["param_file"])}</code></p>'
        if record.get("unknown_params"):
            ptext += ('<p class="err">not declared by any notebook (ignored): '
                      + _e(", ".join(record["unknown_params"])) + "</p>")
        parts.append("<h2>Parameters</h2>" + ptext)
    parts.append(_notebooks_section(record))
    parts.append(_results_section(run_dir, record, reference_gpu))
    parts.append(_env_section(record.get("env") or {}))
    parts.append('<p class="muted">Written by <code>labkit run</code>; the same facts are in '
                 '<a href="run.json">run.json</a>.</p>')
    return _page(title, "\n".join(parts))


def write_run_index(run_dir: Path, record: dict, reference_gpu: str = "h200") -> Path:
    """Write ``<run_dir>/index.html`` from the run's record; returns its path."""
    path = Path(run_dir) / "index.html"
    path.write_text(render_run_index(run_dir, record, reference_gpu), encoding="utf-8")
    return path


#: Most rows a sweep page shows per table of differences.
DIFF_ROWS = 40


def _output_lines(nb_path: Path, run_name: str = "") -> dict[int, list[str]]:
    """``{code cell number: text lines of its outputs}`` (printed text and markdown only), the
    run folder's name written ``<run>``."""
    import nbformat

    try:
        nb = nbformat.read(str(nb_path), as_version=4)
    except Exception:
        return {}
    out: dict[int, list[str]] = {}
    n = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        n += 1
        lines: list[str] = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                lines += o.get("text", "").splitlines()
            data = o.get("data") or {}
            if "text/markdown" in data:
                text = data["text/markdown"]
                lines += ("".join(text) if isinstance(text, list) else text).splitlines()
        if lines:
            out[n] = [ln.strip().replace(run_name, "<run>") if run_name else ln.strip()
                      for ln in lines if ln.strip()]
    return out


def sweep_differences(sweep_dir: Path, record: dict) -> tuple[list[list[str]], list[list[str]]]:
    """What differs between a sweep's runs, as table rows with one column per run: headline
    numbers of the records and the output lines holding a number."""
    runs = [Path(sweep_dir).parent / r["run"] for r in record.get("runs") or [] if r.get("run")]
    if len(runs) < 2:
        return [], []
    numbers = []
    for run in runs:
        got: dict[tuple[str, str], float] = {}
        for path, res, _ in _load_results(run):
            if res is not None:
                got.update({(path.stem, k): v for k, v in headline_numbers(res.data).items()})
        numbers.append(got)
    keys = sorted(set().union(*numbers))
    rec_rows = [[f"<code>{_e(name)}</code>", f"<code>{_e(key)}</code>"]
                + [_e(_fmt_num(n[(name, key)])) if (name, key) in n else "-" for n in numbers]
                for name, key in keys if len({n.get((name, key)) for n in numbers}) > 1]
    out_rows = []
    stems = sorted({p.stem for run in runs for p in (run / "notebooks").glob("*.ipynb")})
    for stem in stems:
        per_run = [_output_lines(run / "notebooks" / f"{stem}.ipynb", run.name) for run in runs]
        for cell in sorted(set().union(*per_run)):
            texts = [r.get(cell, []) for r in per_run]
            for k in range(max(len(t) for t in texts)):
                line = [t[k] if k < len(t) else "" for t in texts]
                if len(set(line)) > 1 and any(ch.isdigit() for ch in "".join(line)):
                    out_rows.append([_e(stem), f"[{cell}]"]
                                    + [f"<code>{_e(x[:160])}</code>" for x in line])
    return rec_rows, out_rows


def _differences_section(sweep_dir: Path, record: dict) -> str:
    runs = [r for r in record.get("runs") or [] if r.get("run")]
    if len(runs) < 2:
        return ""
    try:
        rec_rows, out_rows = sweep_differences(sweep_dir, record)
    except Exception as exc:  # the page still shows the runs
        return f'<h2>What differs</h2><p class="err">{_e(type(exc).__name__)}: {_e(exc)}</p>'
    def combo(r: dict) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in (r.get("combination") or {}).items())

    heads = [f"run {_e(r.get('index'))}: <code>{_e(combo(r))}</code>" for r in runs]
    parts = ["<h2>What differs between the runs</h2>"]
    for rows, title, cols, what, same in (
            (rec_rows, "Result records", ["record", "number"], "numbers",
             "No result record differs between the runs (on the CPU tier the notebooks save "
             "none: they show the recorded references)."),
            (out_rows, "Notebook outputs (lines holding a number)", ["notebook", "cell"], "lines",
             "The notebooks printed the same numbers in every run.")):
        if not rows:
            parts.append(f'<p class="muted">{same}</p>')
            continue
        parts.append(f"<h3>{title}</h3>" + _table([*cols, *heads], rows[:DIFF_ROWS]))
        if len(rows) > DIFF_ROWS:
            parts.append(f'<p class="muted">and {len(rows) - DIFF_ROWS} more {what}</p>')
    return "".join(parts)


def render_sweep_index(sweep_dir: Path, record: dict) -> str:
    """The HTML text of a sweep's ``index.html``."""
    grid = record.get("grid") or {}
    keys = list(grid)
    runs = record.get("runs") or []
    n_ok = sum(r.get("status") == "ok" for r in runs)
    title = f"labkit sweep {record.get('sweep', Path(sweep_dir).name)}"
    sub = (f"{_status(record.get('status'))} · {n_ok}/{len(runs)} runs ok · notebooks: "
           f"{_e(', '.join(record.get('notebooks') or []))} · started {_e(record.get('started'))}"
           f" · {_duration(record.get('duration_s'))}")
    grid_rows = [[f"<code>{_e(k)}</code>", ", ".join(_value(v) for v in vals)]
                 for k, vals in grid.items()]
    rows = []
    for r in runs:
        combo = r.get("combination") or {}
        run = r.get("run")
        status = _status(r.get("status"))
        if r.get("failed"):
            status += f'<div class="err">failed: {_e(", ".join(r["failed"]))}</div>'
        nbtext = (f"{r.get('notebooks_ok', 0)}/{r.get('notebooks_total', 0)}"
                  if "notebooks_total" in r else "-")
        rows.append([str(r.get("index", ""))] + [_value(combo.get(k)) for k in keys]
                    + [status, _e(nbtext), _duration(r.get("duration_s")),
                       _e(", ".join(r.get("results") or [])) or _NONE,
                       _link(f"../{run}/index.html" if run else None, run or "-")])
    base = record.get("base_params") or {}
    parts = [f"<h1>{_e(title)}</h1>", f'<p class="sub">{sub}</p>',
             "<h2>Grid</h2>" + _table(["parameter", "values"], grid_rows)]
    if base:
        parts.append("<h2>Fixed parameters</h2>" + _params_table(base))
    parts.append("<h2>Runs</h2>" + _table(
        ["#"] + [f"<code>{_e(k)}</code>" for k in keys]
        + ["status", "notebooks ok", "duration", "results", "run folder"], rows,
        {len(keys) + 2, len(keys) + 3}))
    parts.append(_differences_section(Path(sweep_dir), record))
    parts.append('<p class="muted">Written by <code>labkit run --sweep</code>; the same facts '
                 'are in <a href="sweep.json">sweep.json</a>.</p>')
    return _page(title, "\n".join(parts))


def write_sweep_index(sweep_dir: Path, record: dict) -> Path:
    """Write ``<sweep_dir>/index.html``; returns its path."""
    path = Path(sweep_dir) / "index.html"
    path.write_text(render_sweep_index(sweep_dir, record), encoding="utf-8")
    return path
