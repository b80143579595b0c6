"""A decode step in hand-written Triton kernels: five fused kernels per layer and one for the
LM head.

Same weights (read live), KV cache (slot or paged, in place), interface and logits as
``TinyGPT.decode_step``; :func:`make_triton_step` builds it, graphs capture it like any step.
One layer (each kernel's docstring says what it fuses and reads)::

    1 ln_qkv_kernel           LN1 + QKV + bias + k/v written into the cache (layer 0: + embeddings)
    2 attention_split_kernel  attention over the cache in place, split along the sequence; the
                              last split of each (row, head) combines them
    3 linear_residual_kernel  out-projection + bias + residual (in place)
    4 ln_linear_kernel        LN2 + MLP up-projection + bias + GELU
    5 linear_residual_kernel  MLP down-projection + bias + residual (in place)

and ``ln_linear_kernel`` as final LayerNorm + LM head: ``5 L + 1`` kernels (gpt2: 61), no
metadata kernels, copies or fills. Each boundary is a true dependency; fewer would need a
grid-wide barrier or float atomics. Tiles (:class:`Blocks`, :func:`choose_blocks`) and the
attention splits depend on the batch size alone, so the grid does too. Capture-safe: no host
sync; the buffers between kernels are made once per batch size outside capture and kept, so
the step must outlive its graphs and two calls must not run concurrently. On CPU the kernels
run in Triton's interpreter (:mod:`labkit.kernels`); float32 tokens equal the readable step's.

Three schedules of the same tiles (``schedule=``, :data:`SCHEDULES`):

- ``"kernels"``: the kernels above, one after another in the stream.
- ``"pdl"``: the same kernels with programmatic dependent launch: each is launched with
  ``launch_pdl=True``, loads its first weight chunk, then waits for the previous kernel
  (``griddepcontrol.wait``) and lets the next one start (``griddepcontrol.launch_dependents``),
  so a kernel's start and its first weight bytes overlap the previous kernel's tail.
- ``"persistent"``: one launch per layer of :func:`labkit.kernels.persistent.layer_kernel`,
  one program per SM running the layer's five stages with a counter barrier between them,
  and the LM head kernel: ``L + 1`` launches (gpt2: 13); the barrier is the grid-wide
  dependency the kernel boundaries were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import torch

from labkit import kernels
from labkit.checks import as_int
from labkit.kernels.waits import PDL, PDL_FIRST, PDL_LATE, PDL_ORDER, READY, READY_ACQUIRE, STREAM
from labkit.step_checks import check_choice
from labkit.model import GPTConfig, TinyGPT

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; torch brings typing_extensions
    from typing_extensions import Unpack

__all__ = ["BARRIERS", "COUNTERS", "PDL_MODES", "POLLS", "SCHEDULES", "WAITS", "Blocks",
           "Counters", "Launch", "PdlMode", "PlanOptions", "Poll", "Schedule", "StepOptions",
           "TritonStep", "Waits", "choose_blocks", "config_blocks", "gpu_launches",
           "kernels_per_step", "make_triton_step", "stage_tiles", "stripes",
           "unavailable_reason"]

unavailable_reason = kernels.unavailable_reason


Schedule = Literal["kernels", "pdl", "persistent"]
Waits = Literal["tile", "stage"]
Poll = Literal["volatile", "acquire"]
Counters = Literal["layer", "stage"]
#: which of a persistent program's tiles of a stage wait at the stage's barrier: ``"tile"``
#: every one (a spin, an acquire, a CTA barrier and an L1 invalidation each), ``"stage"`` the
#: first only (its acquire orders every later load of the program). ``"stage"`` is the
#: default: on an H100, gpt2 at one row, 448 against 479 µs a step, and the same at 8 rows
#: (``scripts/triton_sweep.py --schedule prefetch``, ``data/sweeps/h100-80gb-hbm3/``)
WAITS: tuple[Waits, ...] = ("tile", "stage")
#: how a persistent program polls the ready counter at a barrier: volatile loads, then one
#: acquire (the default), or acquire loads alone (``READY``, ``READY_ACQUIRE`` of
#: :mod:`labkit.kernels.waits`)
POLLS: tuple[Poll, ...] = ("volatile", "acquire")
_POLL_WAIT = {"volatile": READY, "acquire": READY_ACQUIRE}
#: what a persistent layer launch's stages wait on: ``"layer"``, one counter per layer at
#: which the whole grid meets between stages (four barriers; the default), or ``"stage"``,
#: one counter per stage on which only the programs with a tile of the stage arrive, and only
#: those with a tile of the next stage wait (:func:`labkit.kernels.persistent.stage_counter`)
COUNTERS: tuple[Counters, ...] = ("layer", "stage")
#: how a Triton step orders its tiles (the module docstring)
SCHEDULES: tuple[Schedule, ...] = ("kernels", "pdl", "persistent")
#: how each schedule's kernels wait for their inputs (:mod:`labkit.kernels.waits`; PDL_ORDER
#: in the interpreter)
_WAIT = {"kernels": STREAM, "pdl": PDL, "persistent": STREAM}
_WAIT_INTERPRETED = {"kernels": STREAM, "pdl": PDL_ORDER, "persistent": STREAM}
PdlMode = Literal["overlap", "release_at_end", "wait_first"]
#: how a PDL kernel overlaps the one before (:mod:`labkit.kernels.waits`: PDL, PDL_LATE,
#: PDL_FIRST): load the first weights, wait, let the next kernel start; the same, letting the
#: next kernel start only once the stores are issued; or wait and let it start before any load
PDL_MODES: tuple[PdlMode, ...] = ("overlap", "release_at_end", "wait_first")
_PDL_WAIT = {"overlap": PDL, "release_at_end": PDL_LATE, "wait_first": PDL_FIRST}


#: counter barriers of one persistent layer launch, between its five stages
#: (:mod:`labkit.kernels.persistent`)
BARRIERS = 4
#: counters per layer of a persistent step: the layer's (with stage counters, its start
#: counter), then one per stage boundary
_LAYER_COUNTERS = 1 + BARRIERS


def kernels_per_step(n_layer: int, schedule: Schedule = "kernels") -> int:
    """Kernels one Triton step launches: five per layer and the LM head (``5 L + 1``), or
    one per layer and the LM head (``L + 1``) when persistent."""
    n_layer = as_int(n_layer, "n_layer", minimum=1)
    return (n_layer if schedule == "persistent" else 5 * n_layer) + 1


def _pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Blocks:
    """Tile sizes of one batch size's launches (powers of two). Row blocks of 16 or more
    multiply on the tensor cores (``tl.dot``, every tile side at least 16); smaller ones on the
    CUDA cores (:func:`labkit.kernels.common.dot_acc`), where any tile side works."""

    rows: int = 16     # batch rows per program of the matrix kernels
    n: int = 32        # output features per program of the QKV and the MLP up-projection
    n_out: int = 16    # output features per program of the out- and down-projection (D wide)
    k: int = 128       # reduction chunk of the matrix kernels
    head_n: int = 64   # vocabulary entries per program of the LM head
    t: int = 64        # positions per chunk of the attention loop
    splits: int = 1    # attention splits asked for (the step uses ceil(max_seq / split_size))
    warps: int = 4     # warps per program (GPU only)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Blocks.{f.name} must be a positive int, got {v!r}")
        for name in ("rows", "n", "n_out", "k", "head_n", "t", "warps"):
            v = getattr(self, name)
            if v & (v - 1):
                raise ValueError(f"Blocks.{name}={v} is not a power of two")
        small = [n for n in ("n", "n_out", "k", "head_n") if getattr(self, n) < 16]
        if self.dot and small:
            raise ValueError(f"Blocks.{small[0]}={getattr(self, small[0])} is below 16, the "
                             f"smallest tile tl.dot takes at rows={self.rows}; use 16 or "
                             "more, or fewer than 16 rows (the CUDA-core product)")

    @property
    def dot(self) -> bool:
        """Whether the matrix kernels multiply with ``tl.dot`` (16 rows or more)."""
        return self.rows >= 16

    def to_dict(self) -> dict:
        return asdict(self)


#: most attention splits (the last split of a (row, head) holds all their partials)
MAX_SPLITS = 16
#: float32 products of one CUDA-core tile (rows x n x k) per program: 64 per thread at 4 warps
PRODUCT_ELEMS = 8192
#: loop unroll factor of the CUDA-core kernels: more than any loop's trip count (whole)
UNROLL_ALL = 64
#: most rows a program multiplies on the CUDA cores; more go to the tensor cores (16-row
#: tiles). The 12-layer step's faster way on the H200 at 1, 2, 4 and 8 rows
#: (``scripts/triton_sweep.py``, its output in ``data/sweeps/h200/``)
CUDA_CORE_ROWS = 2


def choose_blocks(model: TinyGPT, batch: int, *, interpret: bool = False,
                  sm_count: int | None = None) -> Blocks:
    """Tile sizes for ``batch`` rows. GPU, up to :data:`CUDA_CORE_ROWS` rows: every row in one
    program on the CUDA cores, the output cut into about two programs per SM per launch so
    that the weight reads spread over the SMs, the reduction chunk as long as
    :data:`PRODUCT_ELEMS` allows (the whole row where it fits); more rows: 16-row tensor-core
    tiles (the widths those of the fastest tiles of ``scripts/triton_sweep.py`` on the H200,
    ``data/sweeps/h200/``). Attention is split to about two programs per SM, at most
    :data:`MAX_SPLITS` splits.
    Interpreter (programs run one by one): fewer, larger tiles."""
    sm = sm_count or (1 if interpret else _sm_count(model.device))
    return config_blocks(model.cfg, batch, sm, interpret=interpret)


def config_blocks(cfg: GPTConfig, batch: int, sm_count: int, *,
                  interpret: bool = False) -> Blocks:
    """:func:`choose_blocks` for a configuration on a GPU of ``sm_count`` SMs (no model)."""
    d = cfg.d_model
    rows = _pow2(batch) if batch <= CUDA_CORE_ROWS else 16
    if interpret:
        n, k, t = 64, min(128, max(16, _pow2(d))), min(64, _pow2(cfg.max_seq))
        splits = max(1, min(_cdiv(cfg.max_seq, t), _cdiv(2, batch * cfg.n_head)))
        return Blocks(rows=rows, n=n, n_out=n, k=k, head_n=64, t=t, splits=splits, warps=4)
    itemsize = torch.empty((), dtype=cfg.torch_dtype).element_size()
    sm = sm_count
    if batch <= CUDA_CORE_ROWS:
        n = _columns(3 * d, 2 * sm)
        n_out = _columns(d, 2 * sm)
        k = max(16, min(_pow2(d), PRODUCT_ELEMS // (rows * n)))
        head_n = max(1, min(64, 2 * PRODUCT_ELEMS // (rows * k)))
        t = 32  # short splits: more programs to read the few keys and values
    else:
        n, n_out = (32 if batch <= 16 else 64), 16
        k = 256 if batch <= 16 else 64
        head_n = 64
        t = 64 if itemsize < 4 else 32
    splits = max(1, min(_cdiv(cfg.max_seq, t), _cdiv(2 * sm, batch * cfg.n_head), MAX_SPLITS))
    return Blocks(rows=rows, n=n, n_out=n_out, k=k, head_n=head_n, t=t, splits=splits,
                  warps=4)


def _columns(width: int, programs: int) -> int:
    """Output features per program that cut ``width`` into at least ``programs`` programs
    (a power of two, 1 to 64)."""
    return max(1, min(64, 1 << max(0, (width // programs).bit_length() - 1)))


#: programs the interpreter's stripes are cut for: it runs one program, which walks them
#: all, so that CPU tests run the stripes' masks (widths that are not powers of two)
INTERPRETER_STRIPE_PROGRAMS = 3


def stripes(width: int, row_tiles: int, programs: int, dot: bool) -> tuple[int, int, int]:
    """A persistent stage's ``width`` output columns cut so that each of ``programs``
    programs holds one tile (``row_tiles`` row tiles each): ``(stripe width, its block -- the
    power of two that holds it, at least 16 on the tensor cores --, stripes)``. The
    heuristic's tiles are sized for the plain kernels' grids (about two programs per SM), so
    a persistent program walked two or three of them one after another per stage; one stripe
    each puts all of a program's weight bytes of a stage in flight at once."""
    cols = max(1, programs // max(1, row_tiles))
    w = _cdiv(width, cols)
    return w, max(16 if dot else 1, _pow2(w)), _cdiv(width, w)


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def _heuristic_columns(bl: Blocks, d: int) -> tuple[tuple[int, int, int], ...]:
    """``(tile width, block, column tiles)`` of the QKV, the D-wide and the up-projections with
    the heuristic's tiles (a persistent layer launch without stripes)."""
    return tuple((n, n, _cdiv(width, n))
                 for n, width in ((bl.n, 3 * d), (bl.n_out, d), (bl.n, 4 * d)))


def stage_tiles(cfg: GPTConfig, batch: int, sm_count: int) -> dict[str, int]:
    """Tiles of each matrix stage of a persistent layer launch (the heuristic's tiles, no
    stripes) for ``batch`` rows on a GPU of ``sm_count`` SMs: ``qkv``, ``out`` (the
    out-projection), ``up`` and ``down``. One program per SM takes ``ceil(tiles / sm_count)``
    of a stage; with ``waits=`` only its tiles after the first differ."""
    bl = config_blocks(cfg, batch, sm_count)
    rows = _cdiv(batch, bl.rows)
    qkv, out, up = (cols * rows for _, _, cols in _heuristic_columns(bl, cfg.d_model))
    return {"qkv": qkv, "out": out, "up": up, "down": out}


@dataclass
class _Workspace:
    """One batch size's launch shape and the buffers between its kernels."""

    blocks: Blocks
    #: positions per attention split, and the number of splits
    split: int
    nsplit: int
    x: torch.Tensor        # (B, D) residual stream, model dtype
    q: torch.Tensor        # (B, D) this step's queries
    hidden: torch.Tensor   # (B, 4D) GELU output of the MLP
    m: torch.Tensor        # (B, splits, H) float32: largest score per split
    l: torch.Tensor        # (B, splits, H) float32: sum of exp(score - m)
    acc: torch.Tensor      # (B, splits, D) float32: unnormalised output, heads side by side
    count: torch.Tensor    # (B, H) int32: splits done this step (zero between steps)
    y: torch.Tensor        # (B, D) the attention output, heads side by side
    #: (L, 5) int64: the persistent layers' counters (only grow): the layer's barrier counter
    #: (or, with stage counters, its start counter), then one per stage boundary
    ready: torch.Tensor
    #: (L, programs, 6) int64: persistent with ``stamps``: each program's clock (ns) at its
    #: start, its four arrivals and its end, per layer launch (else ``None``)
    stamps: torch.Tensor | None = None


@dataclass
class Launch:
    """One kernel launch of a step: ``kernel[grid](*args, **constants, num_warps=...)``."""

    kernel: Any
    grid: tuple[int, ...]
    #: the runtime arguments, in the kernel's order (tensors, sizes, floats)
    args: tuple
    #: the ``tl.constexpr`` arguments (each distinct set is one compiled kernel)
    constants: dict
    num_warps: int
    #: launch options: ``launch_pdl``, ``launch_cooperative_grid``
    options: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.kernel.__name__

    def run(self) -> None:
        self.kernel[self.grid](*self.args, **self.constants, num_warps=self.num_warps,
                               **self.options)


class TritonStep:
    """The Triton decode step of one model (the module docstring), called like
    ``model.decode_step``. ``blocks``: a :class:`Blocks` for every batch size, or a mapping of
    the fields to change from :func:`choose_blocks`'s choice (``None``: the heuristic).
    ``schedule``: one of :data:`SCHEDULES`. Persistent only: ``programs``, the programs of a
    layer launch (default one per SM; 1 in the interpreter), and ``cooperative``, whether it
    is launched cooperatively (a grid the GPU cannot hold at once then fails at launch), and
    ``stripes``, whether each stage's columns are cut into one stripe per program
    (:func:`stripes`) instead of the heuristic's tiles (sized for the plain kernels' grids),
    and ``stamps``, whether each program writes the GPU's clock at its start, its arrivals and
    its end (:meth:`stamps_at`; compiled kernels only), and ``prefetch``, whether each
    program first asks L2 for the weights of all its tiles of the layer and of the next
    layer's QKV stage (compiled only), and ``waits``, which of a program's tiles of a stage
    wait at its barrier (:data:`WAITS`), and ``heads``, the attention heads of one row per
    tile of the attention stage (a power of two; above 1 the stage attends unsplit,
    :func:`labkit.kernels.attention.attention_heads_tile`), and ``poll``, how a wait polls
    the ready counter (:data:`POLLS`), and ``counters``, whether the grid meets at one counter
    per layer or each stage's producers arrive on a counter of their own (:data:`COUNTERS`).
    PDL only: ``pdl``, how each kernel overlaps the one before (:data:`PDL_MODES`)."""

    def __init__(self, model: TinyGPT, *,
                 blocks: Blocks | Mapping[str, int] | None = None,
                 schedule: Schedule = "kernels", programs: int | None = None,
                 cooperative: bool = True, pdl: PdlMode = "overlap",
                 stripes: bool = False, stamps: bool = False,
                 prefetch: bool = False, waits: Waits = "stage", heads: int = 1,
                 poll: Poll = "volatile", counters: Counters = "layer") -> None:
        check_choice(waits, "waits", WAITS)
        check_choice(counters, "counters", COUNTERS)
        check_choice(poll, "poll", POLLS)
        check_choice(schedule, "schedule", SCHEDULES)
        check_choice(pdl, "pdl", PDL_MODES)
        if pdl != "overlap" and schedule != "pdl":
            raise ValueError(f"pdl= applies to schedule='pdl' only; this step's schedule "
                             f"is {schedule!r}")
        if programs is not None:
            programs = as_int(programs, "programs", minimum=1,
                              fix="give the programs of a persistent layer launch, such as "
                                  "the GPU's SM count")
        heads = as_int(heads, "heads", minimum=1,
                       fix="give the attention heads of one row per persistent tile, a power "
                           "of two such as 1, 2 or 4")
        if (programs is not None or cooperative is not True or stripes is not False
                or stamps is not False or prefetch is not False
                or waits != "stage" or heads != 1 or poll != "volatile"
                or counters != "layer") and schedule != "persistent":
            raise ValueError("programs=, cooperative=, stripes=, stamps=, prefetch=, waits=, "
                             "heads=, poll= and counters= apply to schedule='persistent' only; "
                             f"this step's schedule is {schedule!r}")
        for name, flag in (("cooperative", cooperative), ("stripes", stripes),
                           ("stamps", stamps), ("prefetch", prefetch)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        if not isinstance(model, TinyGPT):
            raise TypeError(f"model must be a TinyGPT, got {type(model).__name__}; build one "
                            "with labkit.model.build_model")
        most = _pow2(model.cfg.n_head)
        if heads & (heads - 1) or heads > most:
            raise ValueError(f"heads={heads}: the attention heads per tile must be a power of "
                             f"two no larger than {most} (the model's {model.cfg.n_head} "
                             "heads, rounded up to a power of two)")
        if blocks is not None and not isinstance(blocks, (Blocks, Mapping)):
            raise TypeError(f"blocks must be a Blocks, a mapping of its fields or None, got "
                            f"{type(blocks).__name__}")
        if isinstance(blocks, Mapping):
            unknown = sorted(set(blocks) - {f.name for f in fields(Blocks)})
            if unknown:
                raise ValueError(f"unknown Blocks field(s) {unknown}; Blocks has "
                                 f"{[f.name for f in fields(Blocks)]}")
            # the values are checked now, not at the first step (the tl.dot minimum at the
            # first step of a batch size whose rows it applies to)
            replace(Blocks(rows=1), **blocks)
        self._kernels = kernels.load()
        #: whether the kernels run in Triton's interpreter (else compiled for the GPU)
        self.interpret = kernels.interpreted()
        self.model = model
        self.blocks = blocks
        self.schedule: Schedule = schedule
        self.cooperative = cooperative
        #: persistent: cut each stage's columns into one stripe per program (:func:`stripes`)
        #: instead of the heuristic's tiles
        self.stripes = stripes
        #: PDL: how each kernel overlaps the one before (:data:`PDL_MODES`)
        self.pdl: PdlMode = pdl
        if self.interpret and stamps:
            raise ValueError("stamps=True reads the GPU's clock, which Triton's interpreter "
                             "does not have; stamp a step whose kernels are compiled (a CUDA "
                             "GPU, without TRITON_INTERPRET=1)")
        #: persistent: each program stamps the GPU's clock (:meth:`stamps_at`)
        self.stamps = stamps
        if self.interpret and prefetch:
            raise ValueError("prefetch=True asks L2 for the weights with an instruction Triton's "
                             "interpreter does not run; prefetch in a step whose kernels are "
                             "compiled (a CUDA GPU, without TRITON_INTERPRET=1)")
        #: persistent: each program first asks L2 for its tiles' weights of the layer (and of
        #: the next layer's QKV stage)
        self.prefetch = prefetch
        #: persistent: which tiles of a stage wait at its barrier (:data:`WAITS`)
        self.waits: Waits = waits
        #: persistent: how a wait polls the ready counter (:data:`POLLS`)
        self.poll: Poll = poll
        #: persistent: one counter per layer or one per stage (:data:`COUNTERS`)
        self.counters: Counters = counters
        #: persistent: attention heads of one row per tile of the attention stage (above 1:
        #: unsplit)
        self.heads = heads
        if self.interpret and programs not in (None, 1):
            raise ValueError(f"programs={programs}: in Triton's interpreter programs run one "
                             "after another, so a program waiting for another never returns; "
                             "the interpreter runs one (leave programs out)")
        #: programs of a persistent layer launch
        self.programs = 1 if self.interpret else (programs or _sm_count(model.device))
        cfg = model.cfg
        self._device, self._dtype = model.device, cfg.torch_dtype
        # float32 operands (a float32 model, or any model in the interpreter) multiply in
        # full float32; bf16/fp16 operands ignore this and use the tensor cores
        self._precision = ("ieee" if (self.interpret or cfg.torch_dtype == torch.float32)
                           else "tf32")
        self._block_hd = max(16, _pow2(cfg.head_dim))
        self._scale = 1.0 / math.sqrt(cfg.head_dim)
        self._workspaces: dict[int, _Workspace] = {}
        bad = [n for n, p in model.named_parameters() if not p.is_contiguous()]
        if bad:
            raise ValueError(f"the Triton kernels read weights as contiguous rows; "
                             f"{bad[:3]} are not: make them contiguous and build the step "
                             "again")

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, *,
                 check: bool | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        self._check(tokens, positions, slots, check, out)
        return self.decode(tokens, positions, slots, out)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """The step without any check (the dispatcher and graph capture checked the batch)."""
        with torch.no_grad():
            return self._step(tokens, positions, slots, out)

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
               check: bool | None, out: torch.Tensor | None) -> None:
        """The readable step's checks (shared code: same errors, same rules)."""
        m = self.model
        w = m.tok_emb.weight
        if w.device != self._device or w.dtype != self._dtype:
            raise RuntimeError(f"the model moved to {w.device} / {w.dtype} after its Triton "
                               f"step was built on {self._device} / {self._dtype}; build it "
                               "again with make_triton_step(model)")
        if not self.interpret and w.device.type != "cuda":
            raise RuntimeError(
                f"the model is on {w.device} and Triton compiles for GPUs only; run the "
                "kernels in Triton's interpreter: set TRITON_INTERPRET=1 before anything "
                "imports triton (a fresh process), or move the model to a CUDA GPU")
        m.check_step(tokens, positions, slots, check, who="the Triton step with check=True")
        if self.interpret and tokens.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the Triton interpreter copies tensors to the host, which a CUDA "
                               "graph capture forbids; capture in a process without "
                               "TRITON_INTERPRET=1")
        b = tokens.shape[0]
        if out is not None and (not isinstance(out, torch.Tensor)
                                or tuple(out.shape) != (b, m.cfg.vocab_size)
                                or out.dtype != m.cfg.torch_dtype or out.device != m.device
                                or out.stride(1) != 1):
            raise ValueError(f"out must be a ({b}, {m.cfg.vocab_size}) {m.cfg.torch_dtype} "
                             f"tensor on {m.device} with contiguous rows; got "
                             f"{getattr(out, 'shape', type(out).__name__)}")

    def blocks_for(self, batch: int) -> Blocks:
        """The tile sizes a step of ``batch`` rows uses."""
        if isinstance(self.blocks, Blocks):
            return self.blocks
        chosen = choose_blocks(self.model, batch, interpret=self.interpret)
        return replace(chosen, **self.blocks) if self.blocks else chosen

    def launch_shape(self, batch: int) -> dict:
        """Tile sizes, attention splits and kernels of a step of ``batch`` rows."""
        bl = self.blocks_for(batch)
        split, nsplit = self._splits(bl)
        return {"blocks": bl.to_dict(), "split_size": split, "splits": nsplit,
                "schedule": self.schedule,
                "programs": self.programs if self.schedule == "persistent" else None,
                "stripes": self.stripes, "prefetch": self.prefetch, "waits": self.waits,
                "heads": self.heads, "poll": self.poll, "counters": self.counters,
                "kernels": kernels_per_step(self.model.cfg.n_layer, self.schedule)}

    def _splits(self, bl: Blocks) -> tuple[int, int]:
        max_seq = self.model.cfg.max_seq
        splits = 1 if self.heads > 1 else bl.splits  # a tile of several heads is unsplit
        split = _cdiv(_cdiv(max_seq, splits), bl.t) * bl.t
        return split, _cdiv(max_seq, split)

    def _workspace(self, b: int) -> _Workspace:
        """Batch size ``b``'s buffers, kept when made outside a capture (graphs reuse them)."""
        ws = self._workspaces.get(b)
        if ws is not None:
            return ws
        cfg, dev = self.model.cfg, self.model.device
        bl = self.blocks_for(b)
        split, nsplit = self._splits(bl)
        d, h = cfg.d_model, cfg.n_head
        f32 = torch.float32
        ws = _Workspace(
            blocks=bl, split=split, nsplit=nsplit,
            x=torch.empty((b, d), dtype=cfg.torch_dtype, device=dev),
            q=torch.empty((b, d), dtype=cfg.torch_dtype, device=dev),
            hidden=torch.empty((b, 4 * d), dtype=cfg.torch_dtype, device=dev),
            m=torch.empty((b, nsplit, h), dtype=f32, device=dev),
            l=torch.empty((b, nsplit, h), dtype=f32, device=dev),
            acc=torch.empty((b, nsplit, d), dtype=f32, device=dev),
            count=torch.zeros((b, h), dtype=torch.int32, device=dev),
            y=torch.empty((b, d), dtype=cfg.torch_dtype, device=dev),
            ready=torch.zeros((cfg.n_layer, _LAYER_COUNTERS), dtype=torch.int64, device=dev),
            stamps=(torch.zeros((cfg.n_layer, self.programs,
                                 int(self._kernels.persistent.STAMPS.value)),
                                dtype=torch.int64, device=dev) if self.stamps else None))
        if not (dev.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            self._workspaces[b] = ws
        return ws

    def stamps_at(self, batch: int) -> torch.Tensor:
        """The clock stamps of the last step of ``batch`` rows (eager or a graph's replay):
        ``(layers, programs, 6)`` int64 ns, per program its start, its four arrivals and its
        end (:mod:`labkit.kernels.persistent`). Read it after the step has run (synchronise)."""
        if not self.stamps:
            raise ValueError("this step writes no stamps; build it with "
                             "make_triton_step(model, schedule='persistent', stamps=True)")
        ws = self._workspaces.get(batch)
        if ws is None or ws.stamps is None:
            raise ValueError(f"no step of {batch} rows has run yet; run one (or capture its "
                             "graph), then read its stamps")
        return ws.stamps

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
              out: torch.Tensor | None) -> torch.Tensor:
        cfg = self.model.cfg
        # the kernels index rows as ``ptr + row``: strided ids (a column of a larger
        # buffer, say) are copied first; contiguous ones, the usual case, as they are
        tokens, positions, slots = (x if x.is_contiguous() else x.contiguous()
                                    for x in (tokens, positions, slots))
        logits = out if out is not None else torch.empty(
            (tokens.shape[0], cfg.vocab_size), dtype=cfg.torch_dtype, device=tokens.device)
        for launch in self.launches(tokens, positions, slots, logits):
            launch.run()
        return logits

    def launches(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 logits: torch.Tensor) -> list[Launch]:
        """The kernel launches of one step, in order, without running them."""
        m = self.model
        cfg = m.cfg
        b, d, h, v = tokens.shape[0], cfg.d_model, cfg.n_head, cfg.vocab_size
        ws = self._workspace(b)
        bl = ws.blocks
        matvec, attention = self._kernels.matvec, self._kernels.attention
        cache = m.cache
        paged = cache.layout == "paged"
        where = {"MAX_SEQ": cfg.max_seq, "PAGED": paged,
                 "BLOCK_SIZE": cache.block_size if paged else 1,
                 "MAX_BLOCKS": cache.max_blocks if paged else 1}
        table = cache.block_table if paged else slots  # slot layout: never read
        rows = _cdiv(b, bl.rows)
        # the CUDA-core product unrolls its loops (all the chunks' loads in flight at once);
        # the tensor-core tiles keep them rolled (unrolled, 64-row tiles spill registers)
        tiles = {"BLOCK_B": bl.rows, "DOT": bl.dot, "UNROLL": 1 if bl.dot else UNROLL_ALL,
                 "UPCAST": self.interpret, "PRECISION": self._precision}
        out: list[Launch] = []
        wait = (_WAIT_INTERPRETED if self.interpret else _WAIT)[self.schedule]
        if wait == PDL:
            wait = _PDL_WAIT[self.pdl]
        options = {"launch_pdl": True} if self.schedule == "pdl" else {}

        def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **constants: Any) -> None:
            out.append(Launch(kernel, grid, args, constants, bl.warps, dict(options)))

        for i, blk in enumerate(m.layers):
            k_cache, v_cache = cache.kv[0, i], cache.kv[1, i]
            if self.schedule == "persistent":
                out.append(self._layer_launch(i, blk, ws, tokens, positions, slots,
                                              table, k_cache, v_cache, where, tiles, rows))
                continue
            launch(matvec.ln_qkv_kernel, (_cdiv(3 * d, bl.n), rows),
                   ws.x, tokens, positions, slots, m.tok_emb.weight, m.pos_emb.weight,
                   blk.ln1.weight, blk.ln1.bias, blk.qkv.weight, blk.qkv.bias, ws.q, k_cache,
                   v_cache, table, b, blk.ln1.eps, WAIT=wait, D=d, EMBED=i == 0,
                   BLOCK_N=bl.n, BLOCK_K=bl.k, **where, **tiles)
            launch(attention.attention_split_kernel, (b, h, ws.nsplit),
                   ws.q, k_cache, v_cache, positions, slots, table, ws.m, ws.l, ws.acc,
                   ws.count, ws.y, self._scale, WAIT=wait, H=h, HD=cfg.head_dim, D=d,
                   NSPLIT=ws.nsplit, SPLIT=ws.split, BLOCK_T=bl.t, BLOCK_S=_pow2(ws.nsplit),
                   BLOCK_HD=self._block_hd, **where)
            launch(matvec.linear_residual_kernel, (_cdiv(d, bl.n_out), rows),
                   ws.y, blk.proj.weight, blk.proj.bias, ws.x, b, WAIT=wait, K=d, N=d,
                   BLOCK_N=bl.n_out, BLOCK_K=bl.k, **tiles)
            launch(matvec.ln_linear_kernel, (_cdiv(4 * d, bl.n), rows),
                   ws.x, blk.ln2.weight, blk.ln2.bias, blk.fc.weight, blk.fc.bias, ws.hidden,
                   4 * d, b, blk.ln2.eps, WAIT=wait, D=d, N=4 * d, HAS_BIAS=True, GELU=True,
                   BLOCK_N=bl.n, BLOCK_K=bl.k, **tiles)
            launch(matvec.linear_residual_kernel, (_cdiv(d, bl.n_out), rows),
                   ws.hidden, blk.fc_out.weight, blk.fc_out.bias, ws.x, b, WAIT=wait,
                   K=4 * d, N=d, BLOCK_N=bl.n_out, BLOCK_K=bl.k, **tiles)
        w_head = m.lm_head.weight
        launch(matvec.ln_linear_kernel, (_cdiv(v, bl.head_n), rows),
               ws.x, m.ln_f.weight, m.ln_f.bias, w_head, w_head, logits, logits.stride(0), b,
               m.ln_f.eps, WAIT=wait, D=d, N=v, HAS_BIAS=False, GELU=False,
               BLOCK_N=bl.head_n, BLOCK_K=bl.k, **tiles)
        return out

    def _layer_launch(self, i: int, blk: Any, ws: _Workspace, tokens: torch.Tensor,
                      positions: torch.Tensor, slots: torch.Tensor, table: Any,
                      k_cache: torch.Tensor, v_cache: torch.Tensor, where: dict, tiles: dict,
                      rows: int) -> Launch:
        """Layer ``i``'s persistent launch: its five stages in one kernel of
        :attr:`programs` programs, counters ``ws.ready[i]``."""
        m, bl = self.model, ws.blocks
        cfg = m.cfg
        d, nl = cfg.d_model, cfg.n_layer
        options = {"launch_cooperative_grid": True} if self.cooperative else {}
        ready = _POLL_WAIT[self.poll]
        k = bl.k
        if self.stripes:
            cut = INTERPRETER_STRIPE_PROGRAMS if self.interpret else self.programs
            qkv, out, up = (stripes(n, rows, cut, bl.dot) for n in (3 * d, d, 4 * d))
            if not bl.dot:  # the CUDA-core product: as many float32 products as the tiles'
                k = min(k, max(16, PRODUCT_ELEMS * bl.warps // 4 // (bl.rows * up[1])))
        else:
            qkv, out, up = _heuristic_columns(bl, d)
        return Launch(
            self._kernels.persistent.layer_kernel, (self.programs,),
            (ws.x, tokens, positions, slots, m.tok_emb.weight, m.pos_emb.weight,
             blk.ln1.weight, blk.ln1.bias, blk.qkv.weight, blk.qkv.bias, ws.q, k_cache,
             v_cache, table, tokens.shape[0], blk.ln1.eps, ws.m, ws.l, ws.acc, ws.count,
             ws.y, self._scale, blk.proj.weight, blk.proj.bias, blk.ln2.weight,
             blk.ln2.bias, blk.ln2.eps, blk.fc.weight, blk.fc.bias, ws.hidden,
             blk.fc_out.weight, blk.fc_out.bias, m.layers[min(i + 1, nl - 1)].qkv.weight,
             ws.ready[i],
             ws.ready[i] if ws.stamps is None else ws.stamps[i], self.programs),
            {"D": d, "H": cfg.n_head, "HD": cfg.head_dim, **where,
             "EMBED": i == 0, "ROW_TILES": rows, "QKV_COLS": qkv[2], "OUT_COLS": out[2],
             "UP_COLS": up[2], "BLOCK_N": qkv[1], "BLOCK_N_OUT": out[1], "BLOCK_N_UP": up[1],
             "BLOCK_K": k, **tiles, "NSPLIT": ws.nsplit, "SPLIT": ws.split, "BLOCK_T": bl.t,
             "BLOCK_S": _pow2(ws.nsplit), "BLOCK_HD": self._block_hd, "QKV_W": qkv[0],
             "OUT_W": out[0], "UP_W": up[0], "STAMP": self.stamps,
             "PREFETCH": self.prefetch, "NEXT": self.prefetch and i + 1 < nl,
             "LANES": 32 * bl.warps, "LATER": ready if self.waits == "tile" else STREAM,
             "HEADS": self.heads, "GROUPS": _cdiv(cfg.n_head, self.heads), "READY": ready,
             "STAGE_COUNTERS": self.counters == "stage"},
            bl.warps, options)


class PlanOptions(TypedDict, total=False):
    """The keyword arguments of :class:`TritonStep` that plan a GPU step's launches
    (:func:`gpu_launches`, :func:`labkit.kernels.aot.compile_step`): its defaults and what
    each does are :class:`TritonStep`'s, written there once."""

    blocks: Blocks | Mapping[str, int] | None
    schedule: Schedule
    pdl: PdlMode
    stripes: bool
    stamps: bool
    prefetch: bool
    waits: Waits
    heads: int
    poll: Poll
    counters: Counters


class StepOptions(PlanOptions, total=False):
    """Every keyword argument of :class:`TritonStep` (:func:`make_triton_step`)."""

    programs: int | None
    cooperative: bool


def gpu_launches(model: TinyGPT, batch: int, *, sm_count: int = 132,
                 **options: Unpack[PlanOptions]) -> list[Launch]:
    """The launches of a GPU step of ``batch`` rows on ``sm_count`` SMs (one persistent
    program per SM), ``options`` as :class:`TritonStep` takes them; nothing runs."""
    stamps, prefetch = options.pop("stamps", False), options.pop("prefetch", False)
    blocks = options.get("blocks")
    step = TritonStep(model, **options)
    if (stamps or prefetch) and step.schedule != "persistent":
        raise ValueError("stamps= and prefetch= apply to schedule='persistent' only")
    step.interpret = False
    # planned, not run: the interpreter's refusals do not apply
    step.stamps, step.prefetch = stamps, prefetch
    step.programs = sm_count  # plan the GPU's launches, whatever mode the kernels were loaded in
    step._precision = "ieee" if model.cfg.torch_dtype == torch.float32 else "tf32"
    if not isinstance(blocks, Blocks):
        step.blocks = replace(choose_blocks(model, batch, sm_count=sm_count), **(blocks or {}))
    dev = model.device
    tokens = torch.zeros(batch, dtype=torch.long, device=dev)
    slots = torch.full((batch,), model.cfg.scratch_slot, dtype=torch.long, device=dev)
    logits = torch.empty((batch, model.cfg.vocab_size), dtype=model.cfg.torch_dtype, device=dev)
    return step.launches(tokens, tokens, slots, logits)


def make_triton_step(model: TinyGPT, **options: Unpack[StepOptions]) -> TritonStep:
    """The Triton decode step of ``model`` (``RuntimeError`` without Triton); ``options``
    as :class:`TritonStep` takes them (``schedule``: one of :data:`SCHEDULES`)."""
    return TritonStep(model, **options)
