"""labkit.teach.widgets: sliders and the explore() redraw loop (no kernel needed)."""

from __future__ import annotations

import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from labkit.teach import widgets  # noqa: E402


def test_pow2_label():
    assert widgets.pow2_label(1024) == "2^10 = 1,024"
    assert widgets.pow2_label(1024, show_value=False) == "2^10"
    assert widgets.pow2_label(1) == "1"
    assert widgets.pow2_label(3000) == "3,000"


def test_choice_slider_values_and_labels():
    s = widgets.choice_slider([1, 1024, 2**20], description="n", fmt=widgets.pow2_label)
    assert s.value == 1 and s.continuous_update is False
    assert s.options[1] == ("2^10 = 1,024", 1024)
    s = widgets.choice_slider([1, 2, 3], value=3)
    assert s.value == 3
    with pytest.raises(ValueError, match="not one of"):
        widgets.choice_slider([1, 2], value=5)
    with pytest.raises(ValueError, match="at least one"):
        widgets.choice_slider([])


def test_number_slider_picks_int_or_float():
    assert isinstance(widgets.number_slider(1, 10), ipywidgets.IntSlider)
    f = widgets.number_slider(0.5, 20.0, value=6.8)
    assert isinstance(f, ipywidgets.FloatSlider) and f.value == pytest.approx(6.8)
    with pytest.raises(ValueError, match="outside"):
        widgets.number_slider(1, 10, value=11)
    with pytest.raises(ValueError, match="empty"):
        widgets.number_slider(5, 1)


def test_explore_renders_now_and_on_every_change(capsys):
    calls = []

    def render(a, b):
        calls.append((a, b))
        return f"a={a} b={b}"

    a = widgets.choice_slider([1, 2, 3])
    b = widgets.number_slider(0, 5)
    box = widgets.explore(render, {"a": a, "b": b})
    assert calls == [(1, 0)]
    a.value = 3
    b.value = 4
    assert calls[-2:] == [(3, 0), (3, 4)]
    assert list(box.children[:2]) == [a, b]
    assert isinstance(box.children[2], ipywidgets.Output)
    assert box.controls == {"a": a, "b": b}
    box.update()
    assert calls[-1] == (3, 4)
    texts = [o.get("text", "") for o in box.output.outputs]
    assert texts == ["a=3 b=4\n"]  # appended to the widget state, redrawn (not accumulated)


def test_explore_needs_controls():
    with pytest.raises(ValueError, match="at least one control"):
        widgets.explore(lambda: None, {})


def test_append_adds_figures_text_and_lists_to_the_widget_state():
    import plotly.graph_objects as go

    out = ipywidgets.Output()
    fig = go.Figure(go.Bar(x=[1], y=[2]))
    widgets._append(out, [fig, None, ("done",)])
    kinds = [o["output_type"] for o in out.outputs]
    assert kinds == ["display_data", "stream"]
    # (outside a kernel IPython has no formatters, so the figure's data bundle stays empty)
    assert out.outputs[1]["text"] == "done\n"


def test_explore_appends_lists_and_redraws():
    calls = []

    def render(n):
        calls.append(n)
        return [f"n={n}", f"twice {2 * n}"]

    slider = ipywidgets.IntSlider(value=1, min=0, max=5)
    box = widgets.explore(render, {"n": slider})
    texts = [o["text"] for o in box.output.outputs]
    assert texts == ["n=1\n", "twice 2\n"]
    slider.value = 3
    assert calls == [1, 3]
    assert [o["text"] for o in box.output.outputs] == ["n=3\n", "twice 6\n"]
    with pytest.raises(ValueError):
        widgets.explore(render, {})


def test_explore_appends_rich_objects():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import HTML

    InteractiveShell.instance()  # rich display formatting needs a shell, as in a kernel
    box = widgets.explore(lambda s: HTML(f"<b>{s}</b>"), {"s": ipywidgets.Text(value="x")})
    (out,) = box.output.outputs
    assert out["output_type"] == "display_data"
    assert out["data"]["text/html"] == "<b>x</b>"
