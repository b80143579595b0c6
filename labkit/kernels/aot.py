"""Compile the Triton step's kernels for a GPU without one: every launch of a step through
Triton's compiler to PTX and its bundled ``ptxas``, which reports registers and spills.

It checks what the interpreter cannot: that every kernel compiles for the target, and that
:func:`labkit.kernels.step.choose_blocks`'s tiles fit in registers. It needs kernels loaded
for the GPU (no ``TRITON_INTERPRET=1``). ``python -m labkit.kernels.aot PRESET DTYPE BATCH
[LAYOUT [SCHEDULE]]`` prints one line per compiled kernel; ``python -m labkit.kernels.aot
acquire OUT.json`` adds this Triton's :func:`acquire_sass` to a JSON list, and ``python -m
labkit.kernels.aot resources OUT.json`` its :func:`layer_resources`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import warnings
from typing import TYPE_CHECKING, Any

from labkit import kernels
from labkit.model import TinyGPT, build_model, preset
from labkit.support.env import git_state
from labkit.kernels.step import WAITS, PlanOptions, gpu_launches

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; torch brings typing_extensions
    from typing_extensions import Unpack


def _specialized(launch) -> tuple[dict[str, str], dict[str, Any], dict[tuple[int], list]]:
    """What Triton's JIT compiles for ``launch``: the type string of every argument (``*bf16``,
    ``i32``, ``fp32``, ``constexpr``), the constants (the ``tl.constexpr`` arguments, and every
    integer argument equal to 1, which the JIT makes a constant) and the attributes (a pointer
    or integer divisible by 16 gets ``tt.divisibility``), read with the JIT's own
    specialization function: a kernel compiled without them uses other instructions and
    registers than the one the GPU runs (at 64 rows, ``B``, and at four programs per SM, the
    persistent launch's ``P``, are multiples of 16)."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    sig: dict[str, str] = {}
    constants: dict[str, Any] = dict(launch.constants)
    attrs: dict[tuple[int], list] = {}
    args = iter(launch.args)
    for i, name in enumerate(launch.kernel.arg_names):
        if name in launch.constants:
            sig[name] = "constexpr"
            continue
        value = next(args)
        kind, desc = native_specialize_impl(BaseBackend, value, False, True, True)
        sig[name] = kind
        if kind == "constexpr":
            constants[name] = value
        elif desc:
            attrs[(i,)] = BaseBackend.parse_attr(desc)
    return sig, constants, attrs


def _ptxas_report(ptx: str, arch: int) -> dict[str, int]:
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        log = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}a", f.name,
                              "-o", "/dev/null"], capture_output=True, text=True,
                             check=True).stderr

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return {"registers": number(r"Used (\d+) registers"),
            "spill_stores": number(r"(\d+) bytes spill stores"),
            "spill_loads": number(r"(\d+) bytes spill loads")}


def _need_gpu_kernels() -> None:
    """``RuntimeError`` when the kernels were loaded for Triton's interpreter."""
    if kernels.interpreted():
        raise RuntimeError("the kernels were loaded for the interpreter (TRITON_INTERPRET=1); "
                           "compile them in a process without it")


def compile_step(model: TinyGPT, batch: int, *, arch: int = 90, sm_count: int = 132,
                 **options: Unpack[PlanOptions]) -> list[dict]:
    """Compile every distinct kernel of a GPU step of ``batch`` rows for ``sm_<arch>``
    (``options`` as :class:`labkit.kernels.step.TritonStep` takes them: how the step launches
    and tiles its kernels, :func:`labkit.kernels.step.gpu_launches`): per
    kernel ``launches``, ``grid``, ``num_warps``, ``registers``, ``spill_stores``,
    ``spill_loads``, ``shared_bytes``, ``l1_invalidations`` (``CCTL.IVALL`` in its SASS:
    what each acquire must leave, as the SM's L1 is not coherent), ``clock_reads`` (reads
    of ``%globaltimer``, the stamps) and ``prefetches`` (L2 prefetch instructions, ``CCTL``
    with ``PF2``); ``RuntimeError`` under the interpreter."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _need_gpu_kernels()
    rows: dict[tuple, dict] = {}
    for launch in gpu_launches(model, batch, sm_count=sm_count, **options):
        sig, constants, attrs = _specialized(launch)
        key = (launch.name, tuple(sig.items()), tuple(sorted(constants.items())),
               tuple(sorted(attrs)), launch.num_warps)
        if key in rows:
            rows[key]["launches"] += 1
            continue
        compiled = triton.compile(ASTSource(launch.kernel, sig, constants, attrs),
                                  target=GPUTarget("cuda", arch, 32),
                                  options={"num_warps": launch.num_warps})
        rows[key] = {"kernel": launch.name, "launches": 1, "grid": list(launch.grid),
                     "num_warps": launch.num_warps,
                     **_ptxas_report(compiled.asm["ptx"], arch),
                     "shared_bytes": int(compiled.metadata.shared),
                     **_count(sass := _sass(compiled.asm["cubin"])),
                     "clock_reads": sass.count("GLOBALTIMER"),
                     "prefetches": sum("CCTL" in x and "PF2" in x for x in sass.splitlines())}
    return list(rows.values())


def _sass(cubin: bytes) -> str:
    """The SASS of a compiled kernel, whole: Triton's bundled ``cuobjdump -sass`` (Triton's own
    ``triton.tools.disasm.get_sass`` cut a long kernel short in Triton 3.6)."""
    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", f.name],
                              capture_output=True, text=True, check=True).stdout


def _count(sass: str) -> dict[str, int]:
    lines = sass.splitlines()
    return {"acquire_loads": sum("LDG" in x and "STRONG.GPU" in x for x in lines),
            "l1_invalidations": sum("CCTL.IVALL" in x for x in lines)}


def _ptxas(arch: int) -> str:
    """The version of the ptxas this Triton compiles with (``V12.8.93``)."""
    from triton.backends.nvidia.compiler import get_ptxas_version

    found = re.search(r"release ([\d.]+), (V[\d.]+)", str(get_ptxas_version(arch)))
    return found.group(2) if found else str(get_ptxas_version(arch))


def acquire_sass(arch: int = 90) -> dict:
    """What the compiler keeps of an acquire: the two waits of
    :mod:`labkit.kernels.acquire_demo` (its value unused, and labkit's wait, which uses it)
    compiled for ``sm_<arch>``, and per wait the acquire loads (``LDG ... STRONG.GPU``) and L1
    invalidations (``CCTL.IVALL``) in its SASS, with the Triton and ptxas that made it."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _need_gpu_kernels()
    demo = importlib.import_module("labkit.kernels.acquire_demo")
    sig = {"ready_ptr": "*i64", "x_ptr": "*fp32", "out_ptr": "*fp32", "target": "i64"}
    out: dict = {"triton": triton.__version__, "arch": f"sm_{arch}", "ptxas": _ptxas(arch)}
    for name in ("wait_value_unused", "wait_value_used"):
        with warnings.catch_warnings():  # Triton's notices about its future defaults
            warnings.simplefilter("ignore", UserWarning)
            compiled = triton.compile(ASTSource(getattr(demo, name), sig, {}),
                                      target=GPUTarget("cuda", arch, 32))
        out[name] = _count(_sass(compiled.asm["cubin"]))
    return out


#: the persistent step's launches whose resources :func:`layer_resources` compiles: the sweeps'
#: presets, batch sizes and programs per SM (``scripts/triton_sweep.py --schedule prefetch``)
RESOURCE_PRESETS, RESOURCE_SIZES, RESOURCE_PER_SM = ("gpt2", "small"), (1, 8, 64), (1, 2, 4)


def layer_resources(arch: int = 90, sm_count: int = 132) -> list[dict]:
    """What one program of the persistent layer kernel holds, per preset (bf16, ``max_seq``
    256), batch size, programs per SM and ``waits`` (the heuristic's tiles, no stripes, no
    prefetch: the sweeps' default kernel): ``registers`` per thread and ``shared_bytes``, the
    largest over the step's layer kernels (they differ in their counter's alignment), and
    ``num_warps``; compiled for ``sm_<arch>`` as the JIT would (no GPU). Notebook 17 reads how
    many such programs an SM can hold from them."""
    _need_gpu_kernels()
    rows = []
    for name in RESOURCE_PRESETS:
        model = build_model(preset(name, max_batch=max(RESOURCE_SIZES), dtype="bfloat16",
                                   max_seq=256))
        for batch in RESOURCE_SIZES:
            for per_sm in RESOURCE_PER_SM:
                for waits in WAITS:
                    layer = [r for r in compile_step(model, batch, arch=arch,
                                                     sm_count=per_sm * sm_count,
                                                     schedule="persistent", waits=waits)
                             if r["kernel"] == "layer_kernel"]
                    rows.append({"preset": name, "batch": batch, "per_sm": per_sm,
                                 "waits": waits, "num_warps": layer[0]["num_warps"],
                                 "registers": max(r["registers"] for r in layer),
                                 "shared_bytes": max(r["shared_bytes"] for r in layer),
                                 "spill_stores": max(r["spill_stores"] for r in layer)})
    return rows


def _stamped(row: dict) -> dict:
    """``row`` with this Triton's version, its ptxas, the date, the commit and the machine."""
    import datetime

    import triton

    commit, dirty = git_state()
    return {"triton": triton.__version__, "ptxas": _ptxas(90), **row,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit, "git_dirty": dirty,
            "machine": "compiled without a GPU (no kernel ran)"}


def record_resources(path: str) -> dict:
    """Add (or replace) this Triton's :func:`layer_resources` in the JSON list at ``path``, with
    the Triton and ptxas versions, the date and the commit."""
    return _replace_row(path, _stamped({"arch": "sm_90", "rows": layer_resources()}))


def _replace_row(path: str, row: dict) -> dict:
    """Write ``row`` into the JSON list at ``path`` in place of the row of its Triton version,
    the list sorted by version."""
    import json
    import os

    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rows = [r for r in json.load(f) if r["triton"] != row["triton"]]
    rows = sorted([*rows, row], key=lambda r: r["triton"])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    return row


def record_acquire(path: str) -> dict:
    """Add (or replace) this Triton's :func:`acquire_sass` row in the JSON list at ``path``,
    with the date and the commit (:func:`labkit.support.env.git_state`)."""
    return _replace_row(path, _stamped(acquire_sass()))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "acquire":
        print(record_acquire(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "resources":
        print(record_resources(argv[1]))
        return 0
    if len(argv) not in (3, 4, 5):
        print("usage: python -m labkit.kernels.aot PRESET DTYPE BATCH [LAYOUT [SCHEDULE]]\n"
              "       python -m labkit.kernels.aot acquire OUT.json\n"
              "       python -m labkit.kernels.aot resources OUT.json")
        return 2
    name, dtype, batch = argv[0], argv[1], int(argv[2])
    layout = argv[3] if len(argv) >= 4 else "slot"
    schedule = argv[4] if len(argv) == 5 else "kernels"
    model = build_model(preset(name, max_batch=batch, dtype=dtype, kv_layout=layout))
    for row in compile_step(model, batch, schedule=schedule):  # type: ignore[arg-type]
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
