"""labkit.serving.traces.write_or_check / regenerate_main: the write and --check loop of the trace
scripts (scripts/make_trace.py, scripts/make_request_traces.py)."""

from __future__ import annotations

from labkit.serving.traces import regenerate_main, write_or_check

FILES = [("a.csv", "x\n1\n", "wrote a"), ("b.csv", "y\n2\n", "wrote b")]


def test_write_then_check_matches(tmp_path, capsys):
    out = tmp_path / "traces"
    assert write_or_check(out, FILES, check=False) == 0
    assert (out / "a.csv").read_text() == "x\n1\n"
    assert capsys.readouterr().out == "wrote a\nwrote b\n"
    assert write_or_check(out, FILES, check=True) == 0
    assert capsys.readouterr().out == "ok   a.csv\nok   b.csv\n"


def test_check_reports_a_changed_or_missing_file_and_writes_nothing(tmp_path, capsys):
    write_or_check(tmp_path, FILES[:1], check=False)
    (tmp_path / "a.csv").write_text("x\n9\n")
    capsys.readouterr()
    assert regenerate_main("t", tmp_path, lambda: FILES, ["--check"]) == 1
    assert capsys.readouterr().out == "DIFF a.csv\nDIFF b.csv\n"
    assert not (tmp_path / "b.csv").exists() and (tmp_path / "a.csv").read_text() == "x\n9\n"
    assert regenerate_main("t", tmp_path / "new", lambda: FILES, []) == 0
    assert (tmp_path / "new" / "b.csv").read_text() == "y\n2\n"
