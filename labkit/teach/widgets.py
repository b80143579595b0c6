"""ipywidgets helpers: sliders, and :func:`explore`, which redraws a view on every change."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Mapping, Sequence


def _slider(kind: str, **kw: Any):
    import ipywidgets as w  # a dependency; imported when a widget is made

    return getattr(w, kind)(continuous_update=False, style={"description_width": "initial"},
                            layout=w.Layout(width="600px"), **kw)


def pow2_label(n: int, *, show_value: bool = True) -> str:
    """``1024`` → ``'2^10 = 1,024'`` (``'2^10'`` without the value); others as ``3,000``."""
    n = int(n)
    if n >= 2 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}" + (f" = {n:,}" if show_value else "")
    return f"{n:,}"


def choice_slider(values: Sequence[Any], *, description: str = "", value: Any = None,
                  fmt: Callable[[Any], str] = str):
    """A slider over a fixed list of ``values``, labelled by ``fmt``."""
    values = list(values)
    if not values:
        raise ValueError("choice_slider needs at least one value")
    if value is not None and value not in values:
        raise ValueError(f"value {value!r} is not one of the slider's values {values}")
    return _slider("SelectionSlider", options=[(fmt(v), v) for v in values],
                   value=values[0] if value is None else value, description=description)


def number_slider(low: float, high: float, *, step: float | None = None,
                  value: float | None = None, description: str = ""):
    """An integer slider when ``low``, ``high`` and ``step`` are ints, else a float slider."""
    value = low if value is None else value
    if high < low:
        raise ValueError(f"slider range is empty: low={low} > high={high}")
    if not low <= value <= high:
        raise ValueError(f"value {value} lies outside [{low}, {high}]")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step or 1))
    return _slider("IntSlider" if ints else "FloatSlider", min=low, max=high, value=value,
                   step=step or (1 if ints else (high - low) / 100), description=description)


def _append(out: Any, item: Any) -> None:
    if isinstance(item, (list, tuple)):
        for x in item:
            _append(out, x)
    elif isinstance(item, str):
        out.append_stdout(item + "\n")
    elif item is not None:
        out.append_display_data(item)


def explore(render: Callable[..., Any], controls: Mapping[str, Any]):
    """A ``VBox`` of controls over ``render(**values)``, redrawn on change (appended to the
    Output, not ``with out:``, which headless runners echo back and can stall on)."""
    import ipywidgets as w

    if not controls:
        raise ValueError("explore needs at least one control, e.g. {'numel': choice_slider(...)}")
    out = w.Output()

    def update(*_: Any) -> None:
        out.outputs = ()
        _append(out, render(**{name: c.value for name, c in controls.items()}))

    for c in controls.values():
        c.observe(update, names="value")
    box = w.VBox([*controls.values(), out])
    box.update, box.controls, box.output = update, dict(controls), out  # type: ignore[attr-defined]
    update()
    return box

