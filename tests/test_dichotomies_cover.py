"""Cover's formula against a brute-force enumeration of sign patterns on small cases."""

import numpy as np

from analysis.dichotomies import count_dichotomies, cover, general_position


def _patterns_by_lp(X):
    """Brute force: the strict sign vectors s in {±1}^n with s_j (u·x̃_j) ≥ 1 feasible (LP)."""
    from itertools import product

    from scipy.optimize import linprog
    L = np.hstack([X, np.ones((len(X), 1))])
    count = 0
    for s in product((-1.0, 1.0), repeat=len(X)):
        A = -np.asarray(s)[:, None] * L
        res = linprog(np.zeros(L.shape[1]), A_ub=A, b_ub=-np.ones(len(X)),
                      bounds=[(None, None)] * L.shape[1], method="highs")
        count += res.status == 0
    return count


def test_cover_small_values():
    assert cover(1, 1) == 2
    assert [cover(n, 1) for n in range(1, 6)] == [2, 4, 6, 8, 10]   # d = 1: P = 2n
    assert cover(4, 2) == 14 and cover(8, 2) == 58 and cover(3, 2) == 8   # 3 points: all 2^3


def test_cover_matches_enumeration():
    rng = np.random.default_rng(3)
    for n, d in [(4, 1), (5, 2), (6, 2), (5, 3)]:
        X = rng.standard_normal((n, d))
        assert general_position(X)
        assert _patterns_by_lp(X) == cover(n, d) == count_dichotomies(X).P


def test_degenerate_detected():
    X = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [0.0, 1.0]])   # three collinear
    assert general_position(X) is False
    dc = count_dichotomies(X)
    assert dc.general_position is False
    assert dc.cover == 14 and _patterns_by_lp(X) < 14
