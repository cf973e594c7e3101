"""P = number of affine dichotomies: against an LP brute force, Cover's formula and hand cases."""

import json
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from analysis.dichotomies import count_dichotomies, cover, general_position
from meanfield.cli import main as cli_main


def lp_dichotomies(X) -> int:
    """Oracle: count strict sign patterns s ∈ {±1}^n with some (w, b) such that
    s_j (w·x_j + b) ≥ 1 for all j (margin 1 is no restriction by homogeneity), by a depth-first
    search over prefixes with one HiGHS feasibility LP per prefix."""
    X = np.asarray(X, float).reshape(len(X), -1)
    L = np.hstack([X, np.ones((len(X), 1))])
    n, D = L.shape

    def feasible(signs):
        k = len(signs)
        A = -np.asarray(signs, float)[:, None] * L[:k]
        r = linprog(np.zeros(D), A_ub=A, b_ub=-np.ones(k), bounds=[(None, None)] * D,
                    method="highs")
        assert r.status in (0, 2), r.message
        return r.status == 0

    def count(prefix):
        if len(prefix) == n:
            return 1
        return sum(count(prefix + [s]) for s in (1, -1) if feasible(prefix + [s]))

    return count([])


def _grid(*ks):
    axes = [np.arange(k, dtype=float) for k in ks]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(ks))


rng = np.random.default_rng(2024)
CASES = {
    "gauss n=8 d=1": rng.standard_normal((8, 1)),
    "gauss n=10 d=2": rng.standard_normal((10, 2)),
    "gauss n=9 d=3": rng.standard_normal((9, 3)),
    "gauss n=8 d=4": rng.standard_normal((8, 4)),
    "grid 3x3": _grid(3, 3),
    "grid 3x4": _grid(3, 4),
    "cube 2x2x2": _grid(2, 2, 2),
    "collinear 6 in R2": np.array([[t, 2 * t + 1] for t in range(6)], float),
    "collinear 5 in R3": np.array([[t, -t, 3 * t + 1] for t in range(5)], float),
    "coplanar 8 + 2 in R3": np.vstack([np.c_[rng.standard_normal((8, 2)), np.zeros(8)],
                                       [[0.3, 0.1, 1.0], [-0.2, 0.5, -1.5]]]),
    "duplicates in R2": np.vstack([rng.standard_normal((5, 2))] * 2)[:9],
    "duplicates in R1": np.array([[0.0], [1.0], [1.0], [2.0], [0.0]]),
    "all equal": np.ones((4, 2)),
    "small integers d=3": rng.integers(-1, 2, (9, 3)).astype(float),
    "integers d=2": rng.integers(-2, 3, (12, 2)).astype(float),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_lp_brute_force(name):
    X = CASES[name]
    ref = lp_dichotomies(X)
    res = count_dichotomies(X)
    assert res.P == ref
    assert count_dichotomies(X, exact=True).P == ref
    assert res.general_position == (ref == cover(*X.shape))
    assert not res.ambiguous


def test_hand_values():
    # values counted independently of this code, and the d = 1 closed form 2 n'
    assert count_dichotomies(_grid(3, 3)).P == 58
    assert count_dichotomies(CASES["collinear 6 in R2"]).P == 12
    assert count_dichotomies(CASES["duplicates in R1"]).P == 6
    x = np.array([3.0, -1.0, 2.5, 3.0, 7.0, -1.0])
    assert count_dichotomies(x).P == 2 * len(np.unique(x))
    assert count_dichotomies(np.zeros((1, 3))).P == 2


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_cover_in_general_position(d):
    for seed in (0, 1):
        X = np.random.default_rng(seed).standard_normal((50, d))
        res = count_dichotomies(X)
        assert res.P == cover(50, d) == 2 * sum(__import__("math").comb(49, k)
                                                for k in range(d + 1))
        assert res.general_position and not res.ambiguous
        assert res.n_distinct == 50


def test_near_parallel_hyperplanes_are_kept_apart():
    # Kinks at 0 and 1e-7 are distinct hyperplanes at an angle of ~1e-7; a cosine test
    # |cos| > 1 - 1e-9 would merge them (1 - cos ~ 5e-15). Chord distance keeps them apart.
    x = np.array([[0.0], [1e-7], [1.0]])
    res = count_dichotomies(x)
    assert res.P == 6
    # the float mode works on the data centred at 0.5 (column in [-0.5, 0.5]): the normals of
    # the lifted points (-0.5, 1) and (-0.5 + 1e-7, 1) are 1e-7 / (1 + 0.5**2) radians apart
    assert res.tol_range[1] == pytest.approx(1e-7 / 1.25, rel=1e-2)
    # a tolerance above the reported range merges them, one inside it does not
    assert count_dichotomies(x, tol=1e-6).P == 4
    assert count_dichotomies(x, tol=0.5 * res.tol_range[1]).P == 6


def test_tolerance_range_is_consistent():
    X = _grid(3, 4)
    res = count_dichotomies(X)
    a, b = res.tol_range
    assert a < 1e-13 and b > 1e-3
    for t in (2 * a + 1e-15, np.sqrt(a * b), 0.5 * b):
        assert count_dichotomies(X, tol=t).P == res.P


def test_exact_mode_reads_decimals_and_fractions():
    g = _grid(4, 4)
    P_int = count_dichotomies(g.astype(int), exact=True).P
    assert P_int == count_dichotomies(g).P
    assert count_dichotomies(g / 10, exact=True).P == P_int        # 0.1, 0.2, 0.3 as written
    fr = np.array([[Fraction(i, 3), Fraction(j, 7)] for i, j in g.astype(int)], dtype=object)
    assert count_dichotomies(fr, exact=True).P == P_int
    # exact mode resolves what the float mode sees as coincident: a perturbation of 1e-15
    bent = g.copy()
    bent[5, 0] += 2.0 ** -40
    assert count_dichotomies(bent, exact=True).P > P_int


def test_general_position_flag_agrees_with_svd_check():
    for X in (CASES["gauss n=10 d=2"], CASES["grid 3x3"], CASES["coplanar 8 + 2 in R3"],
              CASES["gauss n=8 d=4"]):
        assert count_dichotomies(X).general_position == general_position(X)


def test_bad_input():
    with pytest.raises(ValueError):
        count_dichotomies(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError):
        count_dichotomies(np.ones((3, 2)), tol=0.0)


def test_cli_json_on_data_file_and_config(tmp_path, capsys):
    csv = tmp_path / "g.csv"
    csv.write_text("x1,x2,y\n" + "".join(f"{a},{b},0\n" for a, b in _grid(3, 3)))
    assert cli_main(["dichotomies", str(csv), "--target", "y", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("P", "cover", "general_position", "n", "d")} == \
        {"P": 58, "cover": 74, "general_position": False, "n": 9, "d": 2}
    toml = tmp_path / "c.toml"
    toml.write_text('[data]\nkind = "file"\npath = "g.csv"\ntarget = "y"\n')
    assert cli_main(["dichotomies", str(toml), "--json", "--exact"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["P"] == 58 and out["exact"] is True
    assert cli_main(["dichotomies", str(tmp_path / "missing.csv")]) == 2
