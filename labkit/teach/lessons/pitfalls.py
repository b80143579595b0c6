"""Notebook 07–09 helpers for the ``pitfalls`` record, and the notebook's quiz.

The record is made by :func:`labkit.measure.pitfalls.run_all_pitfalls` (live, on a GPU) or
loaded from the reference results. :func:`by_name`, :func:`summary_rows`, :func:`describe`
and :func:`describe_addresses` turn it into lookups, table rows and plain text;
:data:`QUIZ` and :func:`check_quiz` are exercise 7.1 (which rule does a snippet break?), whose
answers are keys of :data:`labkit.measure.pitfalls.RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.measure.records import Pitfalls, view

# ---------------------------------------------------------------------------- reading records


def _entries(record: Any) -> list[dict]:
    """The record's pitfall entries as dicts, after checking the record against its kind in
    :mod:`labkit.measure.records` (a malformed record raises ``SchemaError`` naming the
    field)."""
    view(record, Pitfalls)
    return list(getattr(record, "data", record)["pitfalls"])


def by_name(record: Any) -> dict[str, dict]:
    """The ``pitfalls`` list of a record (a Result or its data), keyed by pitfall name."""
    return {p["name"]: p for p in _entries(record)}


def summary_rows(record: Any) -> list[dict]:
    """One table row per pitfall: name, rule, first line of the observed error, fixed?"""
    rows = []
    for p in _entries(record):
        first = (p.get("error") or "").strip().splitlines()
        rows.append({"pitfall": p["name"], "rule broken": p.get("rule", ""),
                     "what happened": first[0] if first else "",
                     "fixed": "yes" if p.get("fixed_ok") else "NO"})
    return rows


def describe(p: dict, source: str = "") -> str:
    """Plain-text report of one pitfall entry (what, the real error, the fix); ``source``
    (e.g. ``"recorded on NVIDIA H200 ..."``) is printed in the heading."""
    head = f"== {p['name']}: {p.get('rule', '')}" + (f"  [{source}]" if source else "")
    lines = [head, f"what : {p.get('what', '')}", "error:"]
    lines += ["    " + ln for ln in (p.get("error") or "").splitlines()]
    lines += [f"fix  : {p.get('fix', '')}", f"fixed: {'yes' if p.get('fixed_ok') else 'NO'}"]
    return "\n".join(lines)


def describe_addresses(addr: dict) -> str:
    """Plain-text report of an :func:`address_demo` result."""
    if not addr or "error" in addr:
        return f"address demonstration not available: {addr.get('error') if addr else None}"
    ptrs = addr["replay_output_ptrs"]
    lines = [f"graph A's output data_ptr at {len(ptrs)} replays: "
             + ", ".join(hex(p) for p in ptrs)
             + ("  (identical)" if addr["identical_across_replays"] else "  (CHANGED)")]
    for g in addr["graphs"]:
        seg = g.get("output_segment") or {}
        lines.append(f"graph {g['graph']}: input {hex(g['input_ptr'])}, output "
                     f"{hex(g['output_ptr'])} = segment {hex(seg.get('segment_base', 0))} + "
                     f"{seg.get('offset_in_segment')} bytes, pool {tuple(g['pool_id'])}")
    lines.append(f"an ordinary tensor allocated meanwhile: {hex(addr['ordinary_tensor_ptr'])}")
    k = addr.get("kernel_args")
    if k and "error" not in k:
        lines.append(f"kernel arguments of a captured x * 3: input {hex(k['input_ptr'])} "
                     f"{'found' if k['input_ptr_found'] else 'NOT found'}, output "
                     f"{hex(k['output_ptr'])} {'found' if k['output_ptr_found'] else 'NOT found'}"
                     " as 8-byte values in the kernel node's parameters")
    elif k:
        lines.append(f"kernel arguments: not read ({k['error'][:200]})")
    else:
        lines.append("kernel arguments: not read (needs the cuda-python driver bindings)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- quiz


@dataclass(frozen=True)
class QuizItem:
    """A snippet and the key (in :data:`labkit.measure.pitfalls.RULES`) of the rule it breaks."""

    code: str
    answer: str


QUIZ: dict[str, QuizItem] = {
    "a": QuizItem("def step(x):\n    n = int(x.argmax())\n    return x * n", "host_sync"),
    "b": QuizItem("out = graph.replay()\nstatic_in.copy_(next_batch)\nout2 = graph.replay()\n"
                  "loss = (out - out2).abs().sum()", "output_overwritten"),
    "c": QuizItem("def step(x):\n    return x[x != 0].mean()", "dynamic_shape"),
    "d": QuizItem("static_in = next_batch.cuda()\ngraph.replay()", "input_rebound"),
    "e": QuizItem("def step(x):\n    return x + random.gauss(0, 1)", "rng"),
    "f": QuizItem("with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n    model(x)   # warm-up\n"
                  "    with torch.cuda.graph(g):\n        y = model(x)\n"
                  "    model.load_state_dict(new_weights)\n    g.replay()", "autocast"),
}


def check_quiz(answers: dict[str, Any]) -> dict[str, bool]:
    """Which answers name the right rule key (see :data:`labkit.measure.pitfalls.RULES`)."""
    return {k: answers.get(k) == item.answer for k, item in QUIZ.items()}
