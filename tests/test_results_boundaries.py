"""The result-file boundary: names, schema values, encodings, file modes, JSON keys, and
malformed records (hypothesis): every bad input raises the module's error naming the file
and the field, and nothing is written."""

from __future__ import annotations

import copy
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.measure.records import SchemaError
from labkit.measure.results import (
    load_reference,
    load_result,
    save_result,
    to_jsonable,
    write_text_atomic,
)
from labkit.support.paths import data_dir

CPU_ENV = {"tier": "cpu", "cpu": "test"}


def ref_raw(name: str) -> dict:
    return json.loads((data_dir() / "reference" / "h200" / f"{name}.json").read_text())


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


# ----------------------------------------------------------------------------- the five bugs


@pytest.mark.parametrize("name", ["../h200/launch_overhead", "../../reference/h200/bench",
                                  "h200/../h200/pitfalls", "/etc/passwd", "..", ".hidden",
                                  "a\\b", "", "launch overhead"])
def test_load_reference_refuses_names_that_are_not_plain(name):
    with pytest.raises(ValueError, match=r"plain|no folder parts") as err:
        load_reference(name)
    assert repr(name) in str(err.value)


def test_load_reference_still_reads_plain_names():
    assert load_reference("launch_overhead").name == "launch_overhead"


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_schema_must_be_an_int_not_a_bool(tmp_path, value):
    raw = ref_raw("launch_overhead")
    raw["schema"] = value
    path = tmp_path / "launch_overhead.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(SchemaError, match="'schema' must be an integer") as err:
        load_result(path)
    assert str(path) in str(err.value)


def test_non_utf8_file_is_a_schema_error_naming_the_path(tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"schema": 1, "name": "caf\xe9"}')
    with pytest.raises(SchemaError, match="not UTF-8") as err:
        load_result(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_records_respect_the_umask(tmp_path, mask, mode):
    with umask(mask):
        path = save_result("probe", {"a": 1}, run_dir=tmp_path, env=CPU_ENV)
        other = tmp_path / "plain.txt"
        write_text_atomic(other, "x\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert stat.S_IMODE(other.stat().st_mode) == mode


def test_to_jsonable_refuses_keys_that_collide():
    with pytest.raises(ValueError, match=r"data\['inner'\]: keys 1 and '1' both become"):
        to_jsonable({"inner": {1: "a", "1": "b"}})
    with pytest.raises(ValueError, match="keys 'True' and True"):
        to_jsonable({"True": 1, True: 2}, "params")
    assert to_jsonable({1: "a", 2: "b"}) == {"1": "a", "2": "b"}


def test_save_result_with_colliding_keys_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="both become"):
        save_result("probe", {"by_batch": {1: 0.5, "1": 0.7}}, run_dir=tmp_path, env=CPU_ENV)
    assert not (tmp_path / "results").exists()


def test_a_bad_field_names_the_file_the_field_and_the_writer(tmp_path):
    raw = ref_raw("decode_small")
    raw["env"]["labkit"] = "0.0.9"
    del raw["data"]["times"]["graph"][1]["median"]
    path = tmp_path / "decode_small.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(SchemaError) as err:
        load_result(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: field 'data.times.graph[1].median' is missing")
    assert "re-record it" in msg and "labkit 0.0.9" in msg


# ----------------------------------------------------------------------------- properties

#: (record, path in data, type of the field) for required fields of each kind
REQUIRED = [
    ("decode_small", ("preset",), "str"),
    ("decode_small", ("batch_sizes",), "list"),
    ("decode_small", ("batch_sizes", 1), "int"),
    ("decode_small", ("times",), "dict"),
    ("decode_small", ("times", "graph", 2, "median"), "num"),
    ("decode_small", ("times", "eager", 0, "n"), "int"),
    ("launch_overhead", ("device",), "str"),
    ("launch_overhead", ("n_kernels",), "int"),
    ("launch_overhead", ("sweep", 3, "numel"), "int"),
    ("launch_overhead", ("sweep", 0, "eager"), "dict"),
    ("pool_memory_small", ("sizes",), "list"),
    ("pool_memory_small", ("private", "total_bytes"), "int"),
    ("pool_memory_small", ("shared_largest_first",), "dict"),
    ("dispatcher_small", ("capture_sizes",), "list"),
    ("dispatcher_small", ("times", "dispatcher", 4, "p90"), "num"),
    ("compile_small", ("compile_s",), "num"),
    ("compile_small", ("capture_s",), "num"),
    ("pitfalls", ("pitfalls",), "list"),
    ("pitfalls", ("pitfalls", 2, "name"), "str"),
    ("pitfalls", ("pitfalls", 1, "fixed_ok"), "bool"),
    ("bench", ("rows", 0, "model"), "str"),
    ("bench", ("rows", 3, "batch"), "int"),
    ("bench", ("targets", 1, "value"), "num"),
    ("bench", ("pool",), "list"),
]
BASES = {name: ref_raw(name) for name in {r for r, _, _ in REQUIRED}}

_VALUES = {
    "str": st.text(max_size=5),
    "int": st.integers(-5, 5),
    "float": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
    "bool": st.booleans(),
    "list": st.lists(st.integers(), max_size=2),
    "dict": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    "null": st.none(),
}
_WRONG = {  # value kinds a field of each type must refuse
    "str": ["int", "float", "bool", "list", "dict", "null"],
    "int": ["str", "float", "bool", "list", "dict", "null"],
    "num": ["str", "bool", "list", "dict", "null"],
    "bool": ["str", "int", "float", "list", "dict", "null"],
    "list": ["str", "int", "float", "bool", "dict", "null"],
    "dict": ["str", "int", "float", "bool", "list", "null"],
}


def dotted(path: tuple) -> str:
    out = "data"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


@st.composite
def broken_records(draw):
    """A reference record with one required field removed or given a wrong type."""
    name, path, kind = draw(st.sampled_from(REQUIRED))
    raw = copy.deepcopy(BASES[name])
    parent = raw["data"]
    for p in path[:-1]:
        parent = parent[p]
    if draw(st.booleans()) and not isinstance(path[-1], int):
        del parent[path[-1]]
        return raw, path, "is missing"
    parent[path[-1]] = draw(st.sampled_from(_WRONG[kind]).flatmap(lambda k: _VALUES[k]))
    return raw, path, "must be"


def assert_refused(path: Path, match: str | None = None) -> str:
    folder = path.parent
    before = snapshot(folder)
    with pytest.raises(SchemaError) as err:
        load_result(path)
    assert snapshot(folder) == before, "loading wrote into the folder"
    msg = str(err.value)
    assert str(path) in msg, msg
    if match is not None:
        assert match in msg, msg
    return msg


_SETTINGS = settings(max_examples=120, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(broken_records())
def test_a_malformed_record_is_refused_naming_file_and_field(case):
    raw, path, problem = case
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / f"{raw['name']}.json"
        file.write_text(json.dumps(raw))
        msg = assert_refused(file, f"field '{dotted(path)}'")
        if problem == "is missing":
            assert f"'{dotted(path)}' is missing" in msg


@_SETTINGS
@given(broken_records())
def test_saving_a_malformed_record_writes_nothing(case):
    raw, path, _ = case
    with tempfile.TemporaryDirectory() as tmp:
        with pytest.raises(SchemaError, match=f"field '{dotted(path)}'".replace("[", r"\[")
                           .replace("]", r"\]").replace(".", r"\.")):
            save_result(raw["name"], raw["data"], run_dir=tmp, env=CPU_ENV)
        assert list(Path(tmp).rglob("*")) == []


@_SETTINGS
@given(st.one_of(st.booleans(), st.none(), st.text(max_size=4), st.floats(allow_nan=False),
                 st.integers().filter(lambda v: v != 1), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)))
def test_bad_schema_values_are_refused(value):
    raw = copy.deepcopy(BASES["compile_small"])
    raw["schema"] = value
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "compile_small.json"
        file.write_text(json.dumps(raw))
        assert_refused(file, "schema")


@_SETTINGS
@given(st.sampled_from(["name", "data", "params", "env", "created", "schema"]),
       st.booleans())
def test_envelope_fields_missing_or_mistyped(field, delete):
    raw = copy.deepcopy(BASES["compile_small"])
    if delete:
        del raw[field]
    else:
        raw[field] = [] if field != "data" else "nothing"
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "compile_small.json"
        file.write_text(json.dumps(raw))
        assert_refused(file, field)


@_SETTINGS
@given(st.binary(max_size=200))
def test_junk_bytes_are_refused(junk):
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "junk.json"
        file.write_bytes(junk)
        assert_refused(file)


@_SETTINGS
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c,
                                                                         max_size=3),
                    max_leaves=8))
def test_any_json_that_is_not_a_record_is_refused(value):
    if isinstance(value, dict):
        value.pop("schema", None)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "other.json"
        file.write_text(json.dumps(value))
        assert_refused(file)
