"""Exercise checks of notebook 09 (registered by number; see :mod:`labkit.teach.answers`)."""

from __future__ import annotations

from labkit.teach.answers.registry import exercise
from labkit.teach.exercises import Exercise
