"""Widgets drawn without the widget manager: :func:`static_widget_html` turns a widget view into
plain HTML from the state the executed notebook saved (a slider as a disabled range input at
its last value, an output area's saved outputs, boxes as boxes), so no JavaScript is needed.
"""

from __future__ import annotations

import html
from typing import Any
from collections.abc import Callable

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

#: CSS of the static widgets (added to the page head by :func:`labkit.suite.slides.head_html`).
WIDGET_CSS = """
.labkit-widget { margin: 0.4em 0; }
.labkit-widget-control { display: flex; align-items: center; gap: 0.6em; margin: 0.2em 0; }
.labkit-widget-control input[type=range] { width: 320px; }
.labkit-widget-value { font-family: ui-monospace, monospace; }
.labkit-widget-note { color: #777; font-size: 0.8em; }
.labkit-widget pre { margin: 0.2em 0; }
"""

_SLIDERS = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "SelectionSliderModel",
            "IntRangeSliderModel", "FloatRangeSliderModel", "SelectionRangeSliderModel"}
_BOXES = {"VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel", "AccordionModel", "TabModel"}
_CHOICES = {"DropdownModel", "RadioButtonsModel", "ToggleButtonsModel", "SelectModel"}


def widget_states(nb) -> dict[str, dict]:
    """``{model_id: {"model_name": ..., "state": {...}}}`` saved in the notebook (``{}``: none)."""
    saved = (nb.metadata.get("widgets") or {}).get(WIDGET_STATE) or {}
    return dict(saved.get("state") or {})


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _ref(value: Any) -> str | None:
    return value[len("IPY_MODEL_"):] if isinstance(value, str) and value.startswith("IPY_MODEL_") \
        else None


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _slider(name: str, s: dict) -> str:
    value: Any
    if name.startswith("Selection"):
        labels = list(s.get("_options_labels") or [])
        idx = s.get("index")
        if isinstance(idx, (list, tuple)):
            shown = " – ".join(labels[i] for i in idx if isinstance(i, int) and i < len(labels))
            idx = idx[0] if idx else 0
        else:
            shown = labels[idx] if isinstance(idx, int) and idx < len(labels) else ""
        lo, hi, value = 0, max(len(labels) - 1, 0), idx if isinstance(idx, int) else 0
    else:
        value = s.get("value")
        lo, hi = s.get("min", 0), s.get("max", 100)
        if isinstance(value, (list, tuple)):
            shown = " – ".join(_number(v) for v in value)
            value = value[0] if value else lo
        else:
            shown = _number(value)
    return _control(s, shown, f'<input type="range" min="{_e(lo)}" max="{_e(hi)}" '
                              f'value="{_e(value)}" disabled>')


def _control(s: dict, shown: str, widget: str = "") -> str:
    """A control's description, ``widget`` (HTML) and the value it shows."""
    return (f'<div class="labkit-widget-control"><span>{_e(s.get("description") or "")}</span>'
            f'{widget}<span class="labkit-widget-value">{_e(shown)}</span></div>')


def _choice(s: dict) -> str:
    labels = list(s.get("_options_labels") or [])
    idx = s.get("index")
    return _control(s, labels[idx] if isinstance(idx, int) and idx < len(labels) else "")


def _value_widget(s: dict) -> str:
    value = s.get("value")
    if isinstance(value, str) and "HTML" in str(s.get("_model_name", "")):
        return f"<div>{value}</div>"
    return _control(s, _number(value))


def render_widget(model_id: str, states: dict[str, dict],
                  render_output: Callable[[dict], str], depth: int = 0) -> str:
    """HTML of one widget and its children from the saved state; ``render_output`` draws one
    saved output of an Output widget."""
    entry = states.get(model_id)
    if entry is None or depth > 20:
        return ""
    name, s = entry.get("model_name", ""), entry.get("state") or {}
    if name in _SLIDERS:
        return _slider(name, s)
    if name in _CHOICES:
        return _choice(s)
    if name in _BOXES:
        kids = [render_widget(r, states, render_output, depth + 1)
                for r in (_ref(c) for c in s.get("children") or []) if r]
        return "".join(kids)
    if name == "OutputModel":
        return "".join(render_output(dict(o)) for o in s.get("outputs") or [])
    if name in ("HTMLModel", "HTMLMathModel"):
        return f"<div>{s.get('value') or ''}</div>"
    if name == "LabelModel":
        return f"<div>{_e(s.get('value'))}</div>"
    if "value" in s and name.endswith("Model") and not name.startswith(("Layout", "Style")):
        return _value_widget(s)
    return ""


def _has_control(model_id: str, states: dict[str, dict], depth: int = 0) -> bool:
    entry = states.get(model_id) or {}
    name, s = entry.get("model_name", ""), entry.get("state") or {}
    if name in _SLIDERS or name in _CHOICES:
        return True
    if name not in _BOXES and name not in ("OutputModel", "HTMLModel", "HTMLMathModel",
                                           "LabelModel") and ("value" in s or "index" in s):
        return True  # any other input (a multiple selection, a text box, a checkbox)
    return depth < 20 and any(_has_control(r, states, depth + 1)
                              for r in (_ref(c) for c in s.get("children") or []) if r)


def static_widget_html(model_id: str, states: dict[str, dict],
                       render_output: Callable[[dict], str]) -> str | None:
    """The static HTML of a widget view, or None when its state was not saved."""
    if model_id not in states:
        return None
    body = render_widget(model_id, states, render_output)
    note = ('<div class="labkit-widget-note">shown as the notebook left it; move the controls in '
            'JupyterLab</div>') if _has_control(model_id, states) else ""
    return f'<div class="labkit-widget">{body}{note}</div>'
