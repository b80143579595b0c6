"""The labkit command line: run the notebook suite, benchmark, record references, slides.

Each sub-command imports what it needs when it runs (``labkit --help`` is instant); bad input
ends in one line on stderr naming the problem and the fix (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from labkit import __version__
from labkit.support.envvars import EnvVarError
from labkit.suite.engine import SuiteError, read_run_record
from labkit.suite.params import parse_param_items

#: Exit status for bad input (as argparse uses); a run with a failed notebook exits 1.
EXIT_USAGE = 2
#: Exit status of a run whose notebooks all ran but some HTML page (or the index) was not written.
EXIT_INCOMPLETE = 3


def _command_line() -> str:
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""


def _note_unused(names: list[str], param_file: Path | None) -> None:
    if names:
        print(f"labkit run: note: {', '.join(names)} from {param_file} not passed: no selected "
              "notebook declares them (other notebooks of the suite do)", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from labkit.suite.runner import (
        RunInterrupted, plan_run, plan_sweep, run_suite, run_sweep, summary_line,
        sweep_summary_line,
    )

    params = parse_param_items(args.param)
    param_file = Path(args.file) if args.file else None
    if args.sweep:
        splan = plan_sweep(args.notebooks or None, Path(args.sweep), params, param_file)
        _note_unused(splan.unused, param_file)
        for name in splan.overridden:
            print(f"labkit run: note: {name} is set both by -p/-f and by the sweep file; the "
                  "sweep's values are used", file=sys.stderr)
        if args.check:
            print(f"labkit run: check passed: sweep of {len(splan.combos)} combination(s) over "
                  f"{', '.join(splan.grid)} on {', '.join(p.stem for p in splan.notebooks)}")
            return 0
        try:
            sres = run_sweep(None, Path(args.sweep), timeout=args.timeout, out_root=Path(args.out),
                             plan=splan, progress=True, command=_command_line(),
                             echo=lambda line: print(f"labkit run: {line}", flush=True))
        except RunInterrupted as stop:
            print(f"labkit run: interrupted; recorded in {stop.result.sweep_dir}", file=sys.stderr)
            return 130
        for note in sres.notes:
            print(f"labkit run: {note}", file=sys.stderr)
        print(f"labkit run: {sweep_summary_line(sres)}")
        print("\n".join(str(d) for d in sres.run_dirs))
        return 0 if sres.complete else (EXIT_INCOMPLETE if sres.ok else 1)
    plan = plan_run(args.notebooks or None, params, param_file)
    _note_unused(plan.unused, param_file)
    if args.check:
        print(f"labkit run: check passed: {len(plan.notebooks)} notebook(s), parameters:")
        for nb in plan.notebooks:
            given = ", ".join(f"{k}={v!r}" for k, v in plan.per_notebook[nb].items())
            print(f"  {nb.stem}: {given or 'defaults'}")
        return 0
    try:
        res = run_suite(None, timeout=args.timeout, keep_going=args.keep_going,
                        out_root=Path(args.out), plan=plan, progress=True,
                        command=_command_line())
    except RunInterrupted as stop:
        print(f"labkit run: interrupted; recorded in {stop.result.run_dir}", file=sys.stderr)
        return 130
    for note in res.notes:
        print(f"labkit run: {note}", file=sys.stderr)
    for name in res.pages_missing:
        entry = next(e for e in res.record["notebooks"] if e["name"] == name)
        print(f"labkit run: WARNING: no HTML page for {name}: {entry['html_error']}",
              file=sys.stderr)
    print(f"labkit run: {summary_line(res)}")
    print(res.run_dir)
    return 0 if res.complete else (EXIT_INCOMPLETE if res.ok else 1)


def cmd_bench(args: argparse.Namespace) -> int:
    from labkit.suite.bench_cli import run_bench, run_roofline

    if args.roofline:
        return run_roofline(out_root=Path(args.out))
    return run_bench(quick=args.quick, out_root=Path(args.out), record=args.record)


def cmd_env(args: argparse.Namespace) -> int:
    from labkit.support.env import environment_record, format_record

    rec = environment_record()
    print(json.dumps(rec, indent=2) if args.json else format_record(rec))
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from labkit.measure.results import copy_to_reference

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise SuiteError(f"run folder {run_dir} does not exist: give a folder made by "
                         "`labkit run` or `labkit bench --record` on a GPU (runs/<stamp>-gpu/)")
    record = read_run_record(run_dir) or {}
    if not (run_dir / "results").is_dir() and record.get("tier") == "cpu":
        raise SuiteError(f"{run_dir} is a CPU run: the CPU tier saves no result records (its "
                         "notebooks show the references); file a run made on the GPU named by "
                         "--gpu")
    try:
        copied = copy_to_reference(run_dir, args.gpu)
    except ValueError as exc:  # measured elsewhere than --gpu: never filed under its name
        why = re.sub(r"\s*\(pass force=True to override\)", "", " ".join(str(exc).split()))
        raise SuiteError(f"{why}: a reference folder holds only results measured on the GPU "
                         "it is named after; run the notebooks on that GPU (`labkit run`) and "
                         "file that run, or name the GPU they were measured on with "
                         "--gpu") from None
    for p in copied:
        print(p)
    print(f"{len(copied)} result(s) recorded as references for {args.gpu}")
    return 0


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def cmd_train(args: argparse.Namespace) -> int:
    from labkit.suite.train import train_char_model

    if args.device and args.device.startswith("cuda") and not _cuda_available():
        raise SuiteError(f"--device {args.device}: no CUDA GPU here (torch.cuda.is_available() "
                         "is False); train with --device cpu (about half an hour on two cores)")
    if args.device and not args.device.startswith(("cuda", "cpu")):
        raise SuiteError(f"--device {args.device}: give cpu or cuda (or cuda:N)")
    train_char_model(out=Path(args.out), steps=args.steps, seed=args.seed, device=args.device,
                     batch=args.batch, seq=args.seq)
    return 0


def cmd_slides(args: argparse.Namespace) -> int:
    from labkit.suite.slides import export_slides

    result = export_slides(run_dir=Path(args.run) if args.run else None,
                           out_dir=Path(args.out), notebooks=args.notebooks or None,
                           html=not args.no_html,
                           echo=lambda line: print(f"labkit slides: {line}", flush=True))
    for p in result.files:
        print(p)
    if result.broken_links:
        from labkit.suite.links import summary

        print(f"labkit slides: WARNING: the pages in {args.out} have "
              f"{summary(result.broken_links)}", file=sys.stderr)
    return 0


#: jupyter lab options labkit lab sets itself (loopback only, with a token): not passed on
_LAB_OWN = ("--ip", "--ServerApp.ip", "--port", "--ServerApp.port", "--IdentityProvider.token",
            "--ServerApp.token", "--NotebookApp.token", "--NotebookApp.ip",
            "--ServerApp.root_dir", "--notebook-dir")


def cmd_lab(args: argparse.Namespace) -> int:
    from labkit.suite.lab import start_lab

    extra = list(getattr(args, "jupyter_args", []) or [])
    own = [a for a in extra if a.split("=", 1)[0] in _LAB_OWN]
    if own:
        raise SuiteError(f"{', '.join(own)}: labkit lab sets the address, port, token and folder "
                         "itself (127.0.0.1, --port, $LABKIT_LAB_TOKEN, notebooks/); other "
                         "jupyter lab options are passed on, e.g. "
                         "--ServerApp.shutdown_no_activity_timeout=3600")
    bad = [a for a in extra if not a.startswith("--")]
    if bad:
        raise SuiteError(f"{' '.join(bad)}: labkit lab takes no file names; jupyter lab options "
                         "are passed on as --Name.option=value")
    return start_lab(port=args.port, open_browser=not args.no_browser, extra_args=extra)


def cmd_images(args: argparse.Namespace) -> int:
    from labkit.suite.images import export_images

    for p in export_images(out_dir=Path(args.out), fmt=args.format):
        print(p)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from labkit.suite.serve_cli import check_record_names, record_serving, run_serve, summary_line

    if args.record:
        names = check_record_names(args.only.split(",") if args.only else None)
        if not _cuda_available():
            print("labkit serve --record: no CUDA GPU here (torch.cuda.is_available() is False). "
                  "The serving reference records time CUDA graphs and need an NVIDIA GPU; the "
                  "recorded H200 ones are in data/reference/h200/ (serve_*.json). Without "
                  "--record, labkit serve runs a trace on this CPU.", file=sys.stderr)
            return EXIT_USAGE
        run, failed = record_serving(Path(args.out), names,
                                     echo=lambda line: print(f"labkit serve: {line}", flush=True))
        print(run)
        return 1 if failed else 0
    if args.only:
        raise SuiteError("--only picks records of --record; add --record")
    breaker = None
    if args.breaker:
        breaker = {"window": args.breaker_window, "threshold": args.breaker_threshold,
                   "cooldown_s": args.breaker_cooldown}
    try:
        path, data = run_serve(
            trace=args.trace, mode=args.mode, preset_name=args.preset, device=args.device,
            dtype=args.dtype, max_batch=args.max_batch, kv_layout=args.layout,
            num_blocks=args.num_blocks, capture_sizes=args.sizes, seed=args.seed,
            clock=args.clock, decode_ms=args.decode_ms, max_requests=args.requests,
            window_s=args.window, breaker=breaker, name=args.name, out_root=Path(args.out),
            keep_timeline=not args.no_timeline,
            max_num_batched_tokens=args.max_num_batched_tokens)
    except (ValueError, TypeError, RuntimeError) as exc:  # a bad value: say which, one line
        print(f"labkit serve: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    line = summary_line(data["metrics"], device=data.get("device"), mode=args.mode)
    print(f"labkit serve: {line}")
    print(path)
    return 0


def cmd_tp(args: argparse.Namespace) -> int:
    from labkit.suite.tp_cli import run_tp

    try:
        code, _ = run_tp(out_root=Path(args.out), world_size=args.world_size,
                         backend=args.backend, quick=args.quick, timeout_s=args.timeout,
                         symm_timeout_s=args.symm_timeout)
    except (ValueError, TypeError, RuntimeError) as exc:  # a bad value or too few GPUs
        print(f"labkit tp: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return code


def _sizes_list(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole "
                                         "numbers (e.g. 1,2,4,8)") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give sizes >= 1, e.g. 1,2,4,8")
    return sizes


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1")
    return value


def _one_line(exc: BaseException) -> str:
    """The message on one line: line breaks and the indentation after them become one space."""
    return re.sub(r"\s*\n\s*", " ", str(exc)).strip() or type(exc).__name__


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message already says what went wrong and what to do."""
    out: list[type[BaseException]] = [FileNotFoundError]
    for mod, name in (("labkit.suite.slides", "SlidesError"),
                      ("labkit.suite.images", "ImagesError"),
                      ("labkit.suite.lab", "LabError"), ("labkit.measure.results", "SchemaError"),
                      ("labkit.graphs", "CaptureError")):
        module = sys.modules.get(mod)
        if module is not None and hasattr(module, name):
            out.append(getattr(module, name))
    return tuple(out)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (naming the bad argument and where help is)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="labkit", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"labkit {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="execute the notebook suite (or some notebooks) with papermill")
    r.add_argument("notebooks", nargs="*",
                   help="numbers (03), names (03_capture_replay, workshop_90min), solutions/03 "
                        "or .ipynb paths; default all NN_*.ipynb")
    r.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="papermill parameter (YAML value) for every notebook that declares it "
                        "(repeatable); a name no selected notebook declares is an error")
    r.add_argument("-f", "--file", metavar="PARAMS.yaml",
                   help="YAML file of parameters (name: value); -p wins over it")
    r.add_argument("--sweep", metavar="GRID.yaml",
                   help="YAML mapping of parameter -> list of values: one run per combination")
    r.add_argument("--out", default="runs", help="folder for run folders (default: runs)")
    r.add_argument("--timeout", type=_positive_int, default=1800,
                   help="seconds per cell (default 1800)")
    r.add_argument("--keep-going", action="store_true",
                   help="run the remaining notebooks after one fails")
    r.add_argument("--check", action="store_true",
                   help="check notebooks, parameters, sweep file and environment; run nothing")

    b = sub.add_parser("bench", help="decode benchmark on a GPU: eager, graph, dispatcher, compile")
    b.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    b.add_argument("--out", default="runs", help="folder for the run folder (default: runs)")
    b.add_argument("--record", action="store_true",
                   help="also save every notebook record (decode_*, pool_memory_*, ...)")
    b.add_argument("--roofline", action="store_true",
                   help="only the roofline records of notebook 12 (roofline_*, multistep_*), "
                        "into a new run folder")

    e = sub.add_parser("env", help="print the environment record (GPU, driver, torch, commit)")
    e.add_argument("--json", action="store_true", help="print it as JSON")

    ref = sub.add_parser("reference", help="copy a run's result records into data/reference/<gpu>")
    ref.add_argument("run_dir", help="run folder made on a GPU (runs/<stamp>-gpu/) whose "
                     "results/ are filed")
    ref.add_argument("--gpu", default="h200",
                     help="reference folder name: the GPU the results were measured on "
                          "(default h200)")

    t = sub.add_parser("train", help="train the tiny byte-level checkpoint on the corpus")
    t.add_argument("--out", default="data/checkpoints/char.safetensors",
                   help="checkpoint file to write (default data/checkpoints/char.safetensors)")
    t.add_argument("--steps", type=_positive_int, default=1500,
                   help="optimizer steps (default 1500)")
    t.add_argument("--seed", type=int, default=0, help="seed of weights and data order (default 0)")
    t.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    t.add_argument("--batch", type=_positive_int, default=32, help="windows per step (default 32)")
    t.add_argument("--seq", type=_positive_int, default=128, help="bytes per window (default 128)")

    s = sub.add_parser("slides", help="export notebooks to offline reveal.js decks")
    s.add_argument("notebooks", nargs="*",
                   help="notebooks as for labkit run (03, 03_capture_replay, solutions/03, a "
                        "path); default all NN_*.ipynb")
    s.add_argument("--run", metavar="PATH",
                   help="run folder (runs/<stamp>/) to take the executed notebooks from "
                        "(default: the newest complete run holding them, not a sweep's)")
    s.add_argument("--out", default="build/slides",
                   help="folder for the decks, pages and assets/ (default build/slides)")
    s.add_argument("--no-html", action="store_true", help="decks only, no HTML pages")

    lab = sub.add_parser("lab", help="start JupyterLab on the notebooks for participants",
                         description="JupyterLab on notebooks/, on 127.0.0.1 with a token; "
                                     "other jupyter lab options (--Name.option=value) pass on.")
    lab.add_argument("--port", type=_positive_int, default=8888,
                     help="port to listen on (default 8888; a busy one is replaced by the next "
                          "free one)")
    lab.add_argument("--no-browser", action="store_true", help="do not open a web browser")

    sv = sub.add_parser("serve", help="serve a request trace with continuous batching in one "
                        "step mode; save a serve_<name> record (TTFT/TPOT/ITL percentiles)")
    sv.add_argument("--trace", default="synthetic_requests_poisson",
                    help="shipped trace name or a CSV with arrival_s,prompt_len,output_len")
    sv.add_argument("--mode", default="eager",
                    choices=["eager", "full", "piecewise", "none", "exact"],
                    help="step function: eager decode_step, a padding dispatcher in "
                         "cudagraph mode FULL / PIECEWISE / NONE, or full graphs of every size "
                         "(on a CPU the dispatcher buckets and pads eagerly: no CUDA graph)")
    sv.add_argument("--preset", default="char", help="model preset (default char)")
    sv.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    sv.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="weights and activations (default float32)")
    sv.add_argument("--max-batch", type=_positive_int, default=16,
                    help="cache slots = most requests running at once (default 16)")
    sv.add_argument("--layout", default="slot", choices=["slot", "paged"],
                    help="KV-cache layout (default slot)")
    sv.add_argument("--num-blocks", type=_positive_int, default=None,
                    help="paged layout: blocks in the pool, pad block included")
    sv.add_argument("--sizes", type=_sizes_list, default=None,
                    help="capture sizes, e.g. 1,2,4,8 (default powers of two to --max-batch)")
    sv.add_argument("--seed", type=int, default=0, help="weights and prompts (default 0)")
    sv.add_argument("--clock", default="real", choices=["real", "sim"],
                    help="real time, or simulated (--decode-ms per step): reproducible")
    sv.add_argument("--decode-ms", type=_positive_float, default=10.0,
                    help="simulated clock: ms per decode step (default 10)")
    sv.add_argument("--requests", type=_positive_int, default=None,
                    help="serve only the first N requests of the trace")
    sv.add_argument("--window", type=_positive_float, default=1.0,
                    help="seconds per window of the step series (default 1)")
    sv.add_argument("--breaker", action="store_true",
                    help="circuit breaker: eager while the graph hit rate is low")
    sv.add_argument("--breaker-window", type=_positive_int, default=32,
                    help="steps the breaker watches (default 32)")
    sv.add_argument("--breaker-threshold", type=float, default=0.5,
                    help="trip below this hit rate (default 0.5)")
    sv.add_argument("--breaker-cooldown", type=_positive_float, default=1.0,
                    help="seconds eager after a trip (default 1)")
    sv.add_argument("--name", default=None, help="record name serve_<name> (default the mode)")
    sv.add_argument("--max-num-batched-tokens", type=_positive_int, default=None,
                    help="chunked prefill: at most this many tokens per step, prefill chunks "
                         "beside decodes (vLLM's max_num_batched_tokens; default: off)")
    sv.add_argument("--no-timeline", action="store_true",
                    help="leave each token's and step's time out of the record (metrics, "
                         "windows, per-request TTFT/TPOT/E2EL stay): small files for long traces")
    sv.add_argument("--out", default="runs", help="folder for the run folder (default: runs)")
    sv.add_argument("--record", action="store_true",
                    help="measure every serving reference record (GPU) with its default "
                         "parameters into one run folder; other options are ignored")
    sv.add_argument("--only", default=None,
                    help="with --record: comma-separated record names to measure")

    tp = sub.add_parser("tp", help="tensor-parallel decode on N ranks: all-reduce latency, TP=1 "
                        "vs TP=N step time, compute vs communication; save tp_* records")
    tp.add_argument("--record", action="store_true",
                    help="accepted for symmetry with bench: the records are always saved")
    tp.add_argument("--out", default="runs", help="folder for the run folder (default: runs)")
    tp.add_argument("--world-size", type=_positive_int, default=2, help="ranks (default 2)")
    tp.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                    help="nccl (one GPU per rank; default with CUDA) or gloo (CPU, tiny sizes)")
    tp.add_argument("--quick", action="store_true", help="fewer message sizes and repeats")
    tp.add_argument("--timeout", type=_positive_float, default=150.0,
                    help="seconds for the NCCL launch once the ranks joined (default 150)")
    tp.add_argument("--symm-timeout", type=_positive_float, default=90.0,
                    help="seconds for the symmetric-memory launch (default 90)")

    im = sub.add_parser("images", help="export the suite's charts as PNG/SVG (system Chromium)")
    im.add_argument("--out", default="build/images",
                    help="folder for the images (default build/images)")
    im.add_argument("--format", default="png", choices=["png", "svg"],
                    help="image format (default png)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (0 ok, 1 failed, 2 bad input, 130)."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and getattr(args, "command", None) != "lab":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.jupyter_args = extra
    except SystemExit as exc:  # --help, --version, or argparse's usage error (printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return int(globals()[f"cmd_{args.command}"](args) or 0)  # sub-command x: cmd_x
    except Exception as exc:
        clear = isinstance(exc, _user_errors())  # a failure whose message says what to do
        if not clear and not isinstance(exc, ValueError):
            raise
        print(f"labkit {args.command}: {_one_line(exc)}", file=sys.stderr)
        # bad input (library checks name the problem and the fix; nothing was run) is 2
        return EXIT_USAGE if isinstance(exc, (SuiteError, EnvVarError)) or not clear else 1
    except KeyboardInterrupt:
        print("labkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
