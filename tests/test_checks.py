"""labkit.checks: the shared argument checks refuse instead of coercing, and name the input."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.checks import as_int, as_size_list


def test_as_int_refuses_coercion_and_names_the_bound():
    assert as_int(np.int64(3), "n", minimum=1) == 3
    with pytest.raises(TypeError, match="n must be an int"):
        as_int(2.0, "n")
    with pytest.raises(ValueError, match="n must be >= 1, got 0; give more"):
        as_int(0, "n", minimum=1, fix="give more")


def test_as_size_list_keeps_order_and_refuses_bad_lists():
    assert as_size_list((4, 1, 4), "sizes") == [4, 1, 4]
    assert as_size_list(np.array([2, 1]), "sizes", distinct=True) == [2, 1]
    assert as_size_list(iter([0, 3]), "lengths", minimum=0) == [0, 3]
    for bad, error, words in [
            ([], ValueError, r"sizes must not be empty, got \[\]; give at least one size"),
            ([1, 0], ValueError, r"sizes\[1\] must be >= 1"),
            ([1, 2.5], TypeError, r"sizes\[1\] must be an int"),
            ([True], TypeError, "bool"),
            ("12", TypeError, "sizes must be a list of ints"),
            (3, TypeError, "sizes must be a list of ints")]:
        with pytest.raises(error, match=words):
            as_size_list(bad, "sizes")
    with pytest.raises(ValueError, match=r"sizes: \[2, 4\] appear more than once .* list each "):
        as_size_list([4, 2, 4, 2, 1], "sizes", distinct=True)
    with pytest.raises(ValueError, match=r"sizes must not be empty.*; such as"):
        as_size_list([], "sizes", fix="such as [1, 2]")
