"""labkit.measure.records: the record kinds, their validation, derived values and defaults."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import pytest

from labkit.measure import records as R
from labkit.measure.results import Result, load_result, save_result
from labkit.support.paths import data_dir

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_FILES = sorted((data_dir() / "reference").glob("*/*.json"))


def ref(name: str) -> dict:
    return json.loads((data_dir() / "reference" / "h200" / f"{name}.json").read_text())


# ----------------------------------------------------------------------------- shipped files


def test_there_are_reference_files():
    assert len(REFERENCE_FILES) >= 10


@pytest.mark.parametrize("path", REFERENCE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_reference_file_validates(path):
    res = load_result(path)
    kind = R.kind_of(res.name)
    assert kind is not None, f"{path.name}: no record kind describes {res.name!r}"
    assert isinstance(res.record, kind)


@pytest.mark.parametrize("path", REFERENCE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_reference_has_a_recipe_and_was_measured_by_it(path):
    """Each reference is re-recordable by name (or names its command), and every parameter its
    file stores is the one its recipe resolves to (older files store only those passed)."""
    name = path.stem
    if name not in R.RECIPES:
        assert any(re.fullmatch(re.sub(r"<\w+>", lambda _: r"[\w.-]+", p), name)
                   for p in R.MADE_BY_COMMAND), f"{name}: no recipe and no command makes it"
        return
    stored = {("preset" if k == "preset_name" else k): v
              for k, v in load_result(path).params.items()}
    resolved = R.default_params(name)
    assert {k: resolved.get(k, "<not a parameter>") for k in stored} == stored


@pytest.mark.parametrize("name", sorted(R.RECIPES))
def test_a_recipe_states_only_what_differs_from_its_functions_defaults(name):
    import inspect

    from labkit.measure.records.recipes import measure_function

    sig = inspect.signature(measure_function(name)).parameters
    for key, value in R.recipe(name).params.items():
        p = sig["preset_name" if key == "preset" else key]
        default = list(p.default) if isinstance(p.default, tuple) else p.default
        assert p.default is p.empty or default != value, (
            f"RECIPES[{name!r}] repeats {key}={value!r}, the default of {R.recipe(name).function}")


def test_default_params_resolve_the_signature_and_refuse_unknown_parameters():
    p = R.default_params("decode_small", repeats=5)
    assert p == {"preset": "small", "batch_sizes": [1, 8, 64], "methods": ["eager", "graph"],
                 "dtype": "bfloat16", "repeats": 5, "inner": 10}
    assert R.default_params("serve_full")["capture_sizes"] == [1, 2, 4, 8, 16]
    assert "device" not in R.default_params("dispatcher_overhead")  # where, not what
    with pytest.raises(TypeError, match=r"takes no parameter repeat;.*repeats"):
        R.default_params("decode_small", repeat=5)
    with pytest.raises(KeyError, match="labkit tp"):
        R.recipe("tp_allreduce")
    with pytest.raises(KeyError, match=r"known: .*decode_small"):
        R.recipe("decode_tiny")  # no preset of that name
    assert R.recipe("compile_gpt2") == R.Recipe("bench:measure_compile", {"preset": "gpt2"})
    assert R.default_params("triton_small")["preset"] == "small"
    with pytest.raises(KeyError, match="serve_xyz"):
        R.recipe("serve_xyz")  # serving records are named by what they serve, not a preset


def test_kind_registry():
    assert R.kind_of("decode_small") is R.Decode
    assert R.kind_of("compile_times_gpt2") is R.Decode
    assert R.kind_of("compile_small") is R.Compile
    assert R.kind_of("pool_memory_gpt2") is R.PoolMemory
    assert R.kind_of("dispatcher_small") is R.Dispatcher
    assert R.kind_of("timeline_small") is R.Timeline
    assert R.kind_of("launch_overhead") is R.LaunchOverhead
    assert R.kind_of("pitfalls") is R.Pitfalls
    assert R.kind_of("bench") is R.Bench
    assert R.kind_of("my_experiment") is None and R.kind_of("decode") is None
    assert R.parse("my_experiment", {"a": 1}) == {"a": 1}


# ----------------------------------------------------------------------------- typed access


def test_decode_derived_values_equal_the_stored_ones():
    d = ref("decode_gpt2")["data"]
    rec = R.parse("decode_gpt2", d)
    assert rec.batch_sizes == [1, 8, 64] and rec.kernels_per_step == d["kernels_per_step"]
    for m in rec.methods:
        assert rec.tokens_per_s(m) == d["tokens_per_s"][m]
        assert rec.speedup_vs_eager(m) == d["speedup_vs_eager"][m]
    assert rec.at("graph", 8) == d["times"]["graph"][1]["median"]
    assert rec.at("compile", 8) is None and rec.at("graph", 3) is None
    with pytest.raises(KeyError, match="no method 'compile'"):
        rec.median_us("compile")


def test_derived_value_functions():
    assert R.tokens_per_s(8, 200.0) == pytest.approx(40_000.0)
    assert R.tokens_per_s(8, None) is None
    assert R.speedup(1000.0, 250.0) == 4.0 and R.speedup(None, 1.0) is None
    assert R.ratio(1.1, 1.0) == pytest.approx(1.1) and R.ratio(1.0, None) is None
    row = R.bench_row("small", 1, {"eager": 1000.0, "graph": 100.0, "dispatcher": 110.0})
    assert row["graph_speedup"] == 10.0 and row["dispatcher_over_graph"] == pytest.approx(1.1)
    assert "dispatcher_over_compile" not in row


def test_dispatcher_pool_compile_pitfalls_bench_views():
    disp = R.parse("dispatcher_small", ref("dispatcher_small")["data"])
    assert disp.at("graph_exact", 160) is None   # batch 160: above the largest graph
    pool = R.parse("pool_memory_gpt2", ref("pool_memory_gpt2")["data"])
    assert pool.total_bytes()["shared_largest_first"] == pool.largest_private_bytes
    assert pool.private.per_size_bytes[512] == pool.largest_private_bytes
    comp = R.parse("compile_small", ref("compile_small")["data"])
    raw = ref("compile_small")["data"]
    assert comp.kernels_per_step == raw["kernels_per_step"]
    assert comp.kernels_per_step["compile"] < comp.kernels_per_step["eager"]  # fusion
    assert comp.graph_pool_bytes == raw["memory"]["graph_pool_bytes"]
    pits = R.parse("pitfalls", ref("pitfalls")["data"])
    assert {p.name for p in pits.pitfalls} == {"host_sync", "dynamic_shape", "output_overwritten",
                                   "input_rebound", "rng", "autocast"}
    bench = R.parse("bench", ref("bench")["data"])
    raw_pool = {row["layout"]: row["total_MiB"] for row in ref("bench")["data"]["pool"]}
    assert bench.pool_mib()["private"] == pytest.approx(raw_pool["private"])
    assert bench.rows[0].get("graph_speedup") == bench.rows[0].graph_speedup


def test_pool_memory_new_fields_are_optional_and_parsed():
    data = copy.deepcopy(ref("pool_memory_gpt2")["data"])
    for key in ("max_seq", "logits_bytes", "by_max_seq", "gather"):  # a record of the old engine
        data.pop(key, None)
    old = R.parse("pool_memory_gpt2", data)
    assert (old.max_seq, old.logits_bytes, old.by_max_seq, old.gather) == (None, None, {}, None)
    data.update(max_seq=256, logits_bytes=1000,
                by_max_seq={"1024": {"shared_largest_first_bytes": 7, "kv_cache_bytes": 40},
                            "256": {"shared_largest_first_bytes": 6}},
                gather={"max_seq": 256, "shared_largest_first_bytes": 20, "kv_cache_bytes": 10})
    new = R.parse("pool_memory_gpt2", data)
    assert (new.max_seq, new.logits_bytes) == (256, 1000)
    assert new.by_max_seq == {1024: R.PoolAtMaxSeq(1024, 7, 40), 256: R.PoolAtMaxSeq(256, 6)}
    assert new.gather == R.PoolAtMaxSeq(256, 20, 10, in_place=False)


def test_view_accepts_results_dicts_and_typed_records():
    raw = ref("decode_small")
    res = Result(raw["name"], raw["data"], raw["params"], raw["env"], 1, raw["created"])
    typed = R.view(res, R.Decode)
    assert R.view(typed, R.Decode) is typed
    assert R.view(raw["data"], R.Decode) == typed
    with pytest.raises(TypeError, match="expected a Decode record"):
        R.view(42, R.Decode)
    with pytest.raises(R.SchemaError, match=r"pool_memory_<preset> record \(a dict\): field 'data.private' is missing"):
        R.view(raw["data"], R.PoolMemory)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name, mutate, field, problem", [
    ("decode_small", lambda d: d.pop("times"), "data.times", "is missing"),
    ("decode_small", lambda d: d["times"]["graph"][1].update(median="fast"),
     "data.times.graph[1].median", "must be a number"),
    ("decode_small", lambda d: d["times"]["eager"].pop(), "data.times.eager",
     "one entry per batch size"),
    ("decode_small", lambda d: d["tokens_per_s"]["graph"].__setitem__(0, 1.0),
     "data.tokens_per_s.graph[0]", "data.times gives"),
    ("decode_small", lambda d: d.update(batch_sizes=[1, 8, True]), "data.batch_sizes[2]",
     "must be an integer"),
    ("pool_memory_gpt2", lambda d: d["private"]["per_size_bytes"].update(big=1),
     "data.private.per_size_bytes.big", "keyed by a batch size"),
    ("pool_memory_gpt2", lambda d: d.update(gather={"max_seq": 256}),
     "data.gather.shared_largest_first_bytes", "is missing"),
    ("pool_memory_gpt2", lambda d: d.update(by_max_seq={"256": {
        "shared_largest_first_bytes": "big"}}),
     "data.by_max_seq.256.shared_largest_first_bytes", "must be an integer"),
    ("timeline_small", lambda d: d["eager"]["events"][3].update(lane="TPU"),
     "data.eager.events[3].lane", "'CPU' or 'GPU'"),
    ("pitfalls", lambda d: d["pitfalls"][0].update(fixed_ok="yes"),
     "data.pitfalls[0].fixed_ok", "true or false"),
    ("bench", lambda d: d["targets"][0].pop("pass"), "data.targets[0].pass", "is missing"),
    ("compile_small", lambda d: d.update(compile_s=None), "data.compile_s", "must be a number"),
    ("launch_overhead", lambda d: d["sweep"][0].update(eager=[1]), "data.sweep[0].eager",
     "must be an object"),
])
def test_a_bad_field_is_named(name, mutate, field, problem):
    data = copy.deepcopy(ref(name)["data"])
    mutate(data)
    with pytest.raises(R.SchemaError) as err:
        R.parse(name, data, source="somewhere.json")
    msg = str(err.value)
    assert msg.startswith("somewhere.json: ") and f"field '{field}'" in msg and problem in msg
    assert "re-record" in msg


def test_save_refuses_a_malformed_record_of_a_known_kind(tmp_path):
    data = copy.deepcopy(ref("compile_small")["data"])
    del data["capture_s"]
    with pytest.raises(R.SchemaError, match=r"result 'compile_small' \(not saved\): field "
                                            r"'data.capture_s' is missing"):
        save_result("compile_small", data, run_dir=tmp_path, env={"tier": "cpu"})
    assert not (tmp_path / "results").exists()


# ----------------------------------------------------------------------------- default params


_CONSTANT_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.BinOp, ast.UnaryOp,
                   ast.operator, ast.unaryop, ast.Load)


def _constant(node: ast.AST):
    """The value of a constant expression (literals and arithmetic such as ``2**10``)."""
    if not all(isinstance(n, _CONSTANT_NODES) for n in ast.walk(node)):
        raise ValueError("not a constant")
    return eval(compile(ast.Expression(node), "<cell>", "eval"), {"__builtins__": {}})


def _literals(source: str) -> dict:
    """Top-level ``name = <constant>`` and ``name = dict(k=<constant>, ...)`` of a cell."""
    out = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        call = node.value
        try:
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "dict" \
                    and not call.args:
                value = {k.arg: _constant(k.value) for k in call.keywords}
            else:
                value = _constant(call)
        except ValueError:
            continue
        out[node.targets[0].id] = value
    return out


def notebook_literals(stem: str) -> dict:
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    out: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            out.update(_literals("".join(cell["source"])))
    return out


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


# (notebook, variable[, key of a dict variable]) -> (record, parameter)
NOTEBOOK_PARAMS = [
    ("01_launch_overhead", "n_kernels", None, "launch_overhead", "n_kernels"),
    ("01_launch_overhead", "repeats", None, "launch_overhead", "repeats"),
    ("01_launch_overhead", "numels", None, "launch_overhead", "numels"),
    ("02_eager_decode", "batch_sizes", None, "decode_small", "batch_sizes"),
    ("02_eager_decode", "repeats", None, "decode_small", "repeats"),
    ("02_eager_decode", "tl_params", "batch_size", "timeline_small", "batch_size"),
    ("02_eager_decode", "tl_params", "steps", "timeline_small", "steps"),
    ("03_capture_replay", "batch_sizes", None, "decode_gpt2", "batch_sizes"),
    ("03_capture_replay", "repeats", None, "decode_gpt2", "repeats"),
    ("03_capture_replay", "n_kernels", None, "launch_overhead", "n_kernels"),
    ("03_capture_replay", "launch_repeats", None, "launch_overhead", "repeats"),
    ("03_capture_replay", "numels", None, "launch_overhead", "numels"),
    ("03_capture_replay", "tl_params", "steps", "timeline_small", "steps"),
    ("04_shared_pools", "SIZES", None, "pool_memory_gpt2", "sizes"),
    ("05_padding_dispatcher", "CAPTURE", None, "dispatcher_small", "capture_sizes"),
    ("05_padding_dispatcher", "BATCHES", None, "dispatcher_small", "batch_sizes"),
    ("06_capture_sizes", "SIZES", None, "pool_memory_small", "sizes"),
    ("06_capture_sizes", "CAPTURE", None, "dispatcher_small", "capture_sizes"),
    ("06_capture_sizes", "BATCHES", None, "dispatcher_small", "batch_sizes"),
    ("07_pitfalls", "include_compile", None, "pitfalls", "include_compile"),
    ("08_compile_vs_graphs", "batch_sizes", None, "compile_small", "batch_sizes"),
]


@pytest.mark.parametrize("stem, var, key, record, param", NOTEBOOK_PARAMS,
                         ids=[f"{s}:{v}{'.' + k if k else ''}" for s, v, k, *_ in NOTEBOOK_PARAMS])
def test_notebook_defaults_agree_with_the_records_defaults(stem, var, key, record, param):
    for folder in ("", "solutions/"):
        values = notebook_literals(f"{folder}{stem}")
        assert var in values, f"{folder}{stem}: no literal {var} (the check is out of date)"
        value = values[var] if key is None else values[var][key]
        assert _norm(value) == R.default_params(record)[param], (
            f"{folder}{stem}.ipynb sets {var} = {value!r}, but record {record!r} is measured "
            f"with {param}={R.default_params(record)[param]!r} (its recipe in "
            "labkit.measure.records.RECIPES, or its function's default); change one of them")


def test_default_params_are_copies_and_measure_kwargs_renames_the_preset():
    p = R.default_params("decode_small")
    p["batch_sizes"].append(999)
    assert 999 not in R.default_params("decode_small")["batch_sizes"]
    assert R.measure_kwargs({"preset": "gpt2", "sizes": [1]}) == {"preset_name": "gpt2",
                                                                  "sizes": [1]}
    with pytest.raises(KeyError, match="no recipe"):
        R.default_params("nope")


def test_the_recorder_saves_a_record_with_its_whole_parameter_set(tmp_path, monkeypatch):
    """The worker entry point measures by the recipe and stores the resolved parameters; the
    process-per-record runner reports a failure and goes on."""
    from labkit.measure import recorder

    trace = tmp_path / "tiny.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,3,4\n0.01,2,3\n")
    monkeypatch.setitem(R.RECIPES, "serve_tiny", R.Recipe("serve:measure_serving", {
        "preset": "test", "trace": str(trace), "max_batch": 2, "clock": "sim"}))
    assert recorder.main(["--worker", str(tmp_path), "serve_tiny", '{"repeats": 2}',
                          "serve_tiny_x2"]) == 0
    res = load_result(tmp_path / "results" / "serve_tiny_x2.json")
    assert res.params == R.default_params("serve_tiny", repeats=2)
    assert res.params["repeats"] == 2 and res.params["window_s"] == 1.0  # a signature default
    assert len(res.data["repeats"]) == 2
    if not torch_cuda():
        lines: list[str] = []
        status = recorder.record_each(["pool_overwrite", "launch_overhead"], tmp_path,
                                      echo=lines.append)
        assert status == {"pool_overwrite": "failed (exit 1)",
                          "launch_overhead": "failed (exit 1)"}
        assert lines[0] == "[record] pool_overwrite ..." and len(lines) == 4


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


#: notebooks that pass a helper's argument as the record name: the names the helper gets
NAMES_BY_HELPER = {
    "12_roofline": ["roofline_small", "roofline_gpt2", "multistep_small", "multistep_gpt2"],
    "13_serving": list(R.SERVE_RECORDS)}


def _recording_calls(stem: str) -> list[tuple[list[str], list[str], dict]]:
    """Each ``record_or_reference(nb, NAME, ...)`` call of a notebook: the record names it can
    ask for (an f-string name is filled with each preset), its keywords, and the parameters
    spread into it (``**params``: the keys of that dict literal)."""
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    tree = ast.parse("\n".join(ln for ln in src.splitlines() if not ln.startswith(("%", "!"))))
    assigned = sorted(((node.lineno, t.id, node.value) for node in ast.walk(tree)
                       if isinstance(node, ast.Assign) for t in node.targets
                       if isinstance(t, ast.Name)
                       and isinstance(node.value, (ast.Call, ast.Dict, ast.JoinedStr))),
                      key=lambda a: a[0])
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") ==
                "record_or_reference"):
            continue
        # each variable's last assignment above the call
        dicts = {var: value for line, var, value in assigned if line <= node.lineno}
        name = node.args[1]
        if isinstance(name, ast.Name) and isinstance(dicts.get(name.id), ast.JoinedStr):
            name = dicts[name.id]  # record_name = f"mixed_{name}"
        names = ([name.value] if isinstance(name, ast.Constant) else
                 ["".join(v.value if isinstance(v, ast.Constant) else preset
                          for v in name.values) for preset in ("small", "gpt2")]
                 if isinstance(name, ast.JoinedStr) else NAMES_BY_HELPER[stem])
        spread: dict = {}
        for kw in node.keywords:
            if kw.arg is None:  # **params: a dict(...) or {...} literal assigned above
                d = dicts[kw.value.id]
                keys = ([k.arg for k in d.keywords] if isinstance(d, ast.Call) else
                        [k.value for k in d.keys])
                spread.update(dict.fromkeys(keys))
        out.append((names, [k.arg for k in node.keywords if k.arg not in (None, "show")],
                    spread))
    return out


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb")))
def test_every_recording_call_of_a_notebook_names_a_recipe_and_its_parameters(stem):
    """The live branches run only on a GPU: here each record a notebook measures must resolve
    to a recipe, and every parameter it passes must be one the recipe's function takes."""
    for names, keywords, spread in _recording_calls(stem):
        for name in names:
            takes = R.default_params(name)
            extra = [k for k in [*keywords, *spread] if k not in takes]
            assert not extra, f"{stem}: record_or_reference({name!r}) passes {extra}"
