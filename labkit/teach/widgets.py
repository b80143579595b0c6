"""Small ipywidgets helpers shared by the notebooks.

:func:`explore` wires any controls to a render function whose result (a plotly figure, text,
or a list of those) is redrawn in an output area on every change; :func:`slider_plot` is the
one-slider shorthand. Sliders wait for the mouse to be released (``continuous_update=False``)
so a redraw never queues up behind another.

Widgets need a live kernel: an exported HTML page or slide deck shows no slider. Show the
default view as a static figure as well (``fig.show()``), and tag widget cells
``nbval-ignore-output``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence


def _widgets():
    try:
        import ipywidgets
    except ImportError as exc:  # pragma: no cover - ipywidgets is a dependency
        raise ImportError("labkit.teach.widgets needs ipywidgets: pip install 'ipywidgets>=8.1'") from exc
    return ipywidgets


def pow2_label(n: int, *, show_value: bool = True) -> str:
    """``1024`` → ``'2^10 = 1,024'`` (``'2^10'`` with ``show_value=False``); other numbers
    with thousands separators."""
    n = int(n)
    if n >= 2 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}" + (f" = {n:,}" if show_value else "")
    return f"{n:,}"


def choice_slider(values: Sequence[Any], *, description: str = "", value: Any = None,
                  fmt: Callable[[Any], str] = str):
    """A slider over a fixed list of ``values`` (e.g. the sizes a sweep measured).

    ``fmt`` turns a value into its label (:func:`pow2_label` for powers of two).
    """
    w = _widgets()
    values = list(values)
    if not values:
        raise ValueError("choice_slider needs at least one value")
    if value is not None and value not in values:
        raise ValueError(f"value {value!r} is not one of the slider's values {values}")
    return w.SelectionSlider(
        options=[(fmt(v), v) for v in values], value=values[0] if value is None else value,
        description=description, continuous_update=False,
        style={"description_width": "initial"}, layout=w.Layout(width="600px"))


def number_slider(low: float, high: float, *, step: float | None = None, value: float | None = None,
                  description: str = ""):
    """An integer slider when ``low``, ``high`` and ``step`` are ints, else a float slider."""
    w = _widgets()
    if high < low:
        raise ValueError(f"slider range is empty: low={low} > high={high}")
    value = low if value is None else value
    if not low <= value <= high:
        raise ValueError(f"value {value} lies outside [{low}, {high}]")
    common = dict(min=low, max=high, value=value, description=description,
                  continuous_update=False, style={"description_width": "initial"},
                  layout=w.Layout(width="600px"))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step or 1)):
        return w.IntSlider(step=step or 1, **common)
    return w.FloatSlider(step=step or (high - low) / 100, **common)


def _append(out: Any, item: Any) -> None:
    """Append one render result to the Output widget's state: text as stdout, anything else
    (a plotly figure, HTML) as display data; lists item by item."""
    if item is None:
        return
    if isinstance(item, (list, tuple)):
        for x in item:
            _append(out, x)
    elif isinstance(item, str):
        out.append_stdout(item + "\n")
    else:
        out.append_display_data(item)


def explore(render: Callable[..., Any], controls: Mapping[str, Any]):
    """Controls above an output area; ``render(**{name: control.value})`` is called once now
    and again whenever a control changes, and what it returns (a figure, a string, or a list
    of those) is shown in the output area.

    Results are *appended* to the ``Output`` widget's state rather than displayed inside
    ``with out:``. Headless runners (papermill, nbclient, nbval) imitate a front end for
    ``with out:`` and send every captured output (megabytes for a plotly figure) back to the
    kernel while waiting for the cell's reply; that race can stall the cell until its
    timeout. Appending sends nothing back.

    Returns the ``VBox``: end the cell with it (or ``display()`` it). ``box.update()`` redraws
    by hand; ``box.controls`` holds the controls by name; ``box.output`` the output area.
    """
    w = _widgets()
    if not controls:
        raise ValueError("explore needs at least one control, e.g. {'numel': choice_slider(...)}")
    out = w.Output()

    def update(*_: Any) -> None:
        values = {name: c.value for name, c in controls.items()}
        out.outputs = ()
        _append(out, render(**values))

    for c in controls.values():
        c.observe(update, names="value")
    box = w.VBox([*controls.values(), out])
    box.update = update  # type: ignore[attr-defined]
    box.controls = dict(controls)  # type: ignore[attr-defined]
    box.output = out  # type: ignore[attr-defined]
    update()
    return box


def slider_plot(render: Callable[[Any], Any], values: Sequence[Any], *, name: str = "value",
                description: str = "", value: Any = None, fmt: Callable[[Any], str] = str):
    """One :func:`choice_slider` over ``values`` driving ``render(value)`` (see :func:`explore`)."""
    slider = choice_slider(values, description=description or name, value=value, fmt=fmt)
    return explore(lambda **kw: render(kw[name]), {name: slider})
