"""Exercise checks, one module per notebook, kept out of the cell the learner edits.

A learner's cell holds only their answers and ``nb.check("11.3", buggy_line=buggy_line)``;
the checks (and so the expected answers) are registered here by number with
:func:`~labkit.teach.answers.registry.exercise`. The worked answers are in
``notebooks/solutions/``.
"""

from __future__ import annotations

from labkit.teach.answers import (  # noqa: F401  (importing registers each notebook's checks)
    n00, n01, n02, n03, n04, n05, n06, n07, n08, n09, n10, n11, n12, n13, n14, n15, n16, n17,
    n18,
)
from labkit.teach.answers.registry import KINDS, REGISTRY, THINKING, exercise, run

__all__ = ["KINDS", "REGISTRY", "THINKING", "exercise", "run"]
