"""What a serving run leaves behind: each request's token times (:class:`RequestResult`), each
engine step (:class:`StepRecord`) and the run (:class:`ServeRun`). The loop
(:mod:`labkit.serving.loop`) fills them; a ``serve_<name>`` record stores them and
:mod:`labkit.measure.records.serving` reads them back as the same classes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestResult:
    """One request's arrival, admission, token times (s from the start) and token ids."""

    index: int
    arrival_s: float
    prompt_len: int
    output_len: int
    admitted_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def problem(self) -> tuple[str, str] | None:
        """The field that is inconsistent in this request and why (None: nothing is)."""
        if len(self.token_times_s) > self.output_len:
            return "token_times_s", (f"has {len(self.token_times_s)} times for output_len="
                                     f"{self.output_len}")
        return None


@dataclass(frozen=True)
class StepRecord:
    """One engine step: times, requests (``batch``), tokens computed with padding
    (``padded``), runtime mode, graph hit, admissions, real tokens and prompt tokens among them
    (a decode step: one token a row and none of a prompt)."""

    start_s: float
    end_s: float
    batch: int
    padded: int
    runtime: str
    graph: bool
    admitted: int
    tokens: int
    prefill_tokens: int

    def problem(self) -> tuple[str, str] | None:
        """The field that is inconsistent in this step and why (None: nothing is)."""
        if self.padded < self.tokens:
            return "padded", f"({self.padded}) is below the {self.tokens} tokens the step ran"
        return None


@dataclass
class ServeRun:
    """A finished run: its requests (trace order) and engine steps."""

    requests: list[RequestResult]
    steps: list[StepRecord]
    #: the clock's reading at the start (times in the run are relative to it)
    clock_start: float = 0.0

    def to_data(self) -> dict:
        """The run as plain JSON-able data (the ``requests``/``steps`` of a ``serve_`` record;
        a request's ``index`` is its place in the list)."""
        return {"requests": [{k: v for k, v in asdict(r).items() if k != "index"}
                             for r in self.requests],
                "steps": [asdict(s) for s in self.steps]}
