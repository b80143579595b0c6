"""The record kind of the pitfall demos: ``pitfalls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from labkit.measure.records.fields import _bool, _dict, _list, _opt, _req, _str


# ----------------------------------------------------------------------------- pitfalls


@dataclass(frozen=True)
class Pitfall:
    """One capture pitfall reproduced: the rule, what happened (``error``: the first error
    seen, ``None`` if none), the fix and whether the fixed version ran (``fixed_ok``).
    ``details`` is free-form per pitfall."""

    name: str
    rule: str
    what: str
    error: str | None
    fix: str
    fixed_ok: bool
    details: dict

    @classmethod
    def from_data(cls, v: Any, where: str) -> "Pitfall":
        d = _dict(v, where)
        return cls(name=_req(d, "name", where, _str), rule=_opt(d, "rule", where, _str, ""),
                   what=_opt(d, "what", where, _str, ""), error=_opt(d, "error", where, _str),
                   fix=_opt(d, "fix", where, _str, ""),
                   fixed_ok=_req(d, "fixed_ok", where, _bool),
                   details=_opt(d, "details", where, _dict, {}))


@dataclass(frozen=True)
class Pitfalls:
    """``pitfalls``: the pitfalls shown on ``device``, the address demonstration (free-form;
    ``{"error": ...}`` when it failed) and the torch.compile pitfall (``None``: not run)."""

    RECORD = "pitfalls"  # the record name(s) of this kind

    device: str
    torch: str
    pitfalls: list[Pitfall]
    address_demo: dict
    compiled: Pitfall | None

    @classmethod
    def from_data(cls, d: Mapping, where: str = "data") -> "Pitfalls":
        return cls(device=_opt(d, "device", where, _str, ""),
                   torch=_opt(d, "torch", where, _str, ""),
                   pitfalls=[Pitfall.from_data(p, f"{where}.pitfalls[{i}]")
                             for i, p in enumerate(_req(d, "pitfalls", where, _list))],
                   address_demo=_opt(d, "address_demo", where, _dict, {}),
                   compiled=_opt(d, "compiled", where, Pitfall.from_data))

    def by_name(self) -> dict[str, Pitfall]:
        return {p.name: p for p in self.pitfalls}
