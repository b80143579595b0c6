"""Where and when records were made, read from their environment blocks, so that prose about two
records (one machine or two, one commit or two, how far apart) is checked against them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

#: the environment fields that name a machine: a record made elsewhere differs in one of them
MACHINE_FIELDS = ("gpu_name", "cpu", "cpu_count", "platform")


def _env(record: Any) -> dict:
    env = getattr(record, "env", None)
    if not isinstance(env, dict):
        raise TypeError(f"expected a labkit Result with an environment record, got "
                        f"{type(record).__name__}")
    return env


def recorded_at(record: Any) -> datetime:
    """When ``record`` was made (its environment's ``date``, ISO 8601 with a time zone)."""
    date = _env(record).get("date")
    if not isinstance(date, str):
        raise ValueError("the record's environment holds no date: re-record it with labkit")
    return datetime.fromisoformat(date)


def same_machine(*records: Any) -> bool:
    """True when every record names the same GPU, CPU, core count and platform (kernel build);
    a field missing from any record makes it False (unknown is not the same)."""
    if len(records) < 2:
        raise ValueError(f"compare at least two records, got {len(records)}")
    envs = [_env(r) for r in records]
    return all(envs[0].get(k) is not None and all(e.get(k) == envs[0][k] for e in envs[1:])
               for k in MACHINE_FIELDS)


def same_commit(*records: Any) -> bool:
    """True when every record was made at one git commit (abbreviations match their full
    hashes); a missing commit makes it False."""
    if len(records) < 2:
        raise ValueError(f"compare at least two records, got {len(records)}")
    commits = [c for c in (_env(r).get("git_commit") for r in records)
               if isinstance(c, str) and c]
    if len(commits) < len(records):
        return False
    short = min(len(c) for c in commits)
    return len({c[:short] for c in commits}) == 1


def hours_between(earlier: Any, later: Any) -> float:
    """Hours from ``earlier``'s recording to ``later``'s (negative when ``later`` is older)."""
    return (recorded_at(later) - recorded_at(earlier)).total_seconds() / 3600


def minutes_apart(a: Any, b: Any) -> float:
    """Minutes between the two recordings, whichever came first."""
    return abs(hours_between(a, b)) * 60
