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


# ------------------------------------------------ bounded counts: closed form, limit, signals

def test_closed_form_matches_the_enumeration_in_general_position():
    """Random sets in general position where checking it is cheaper than enumerating
    (n <= d + 1, and n a little above d + 1): Cover's closed form, equal to the exact integer
    enumeration and to the float enumeration."""
    from analysis.dichotomies import count_dichotomies as count
    rng = np.random.default_rng(11)
    for n, d in [(8, 7), (9, 9), (12, 10), (13, 11), (15, 12), (16, 14)]:
        X = rng.standard_normal((n, d))
        res = count(X)
        assert res.closed_form and res.tol_range is None and res.method == "closed-form"
        assert res.P == cover(n, d) and res.general_position
        assert count(X, closed_form=False).P == res.P
        if n <= 13:                                      # pure Python: 8190 regions at most
            assert count(X, exact=True).P == res.P


def test_no_closed_form_off_general_position():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((8, 9))
    X[3] = X[1]                                          # a duplicate
    res = count_dichotomies(X)
    assert not res.closed_form and res.P == count_dichotomies(X, exact=True).P < cover(8, 9)
    Y = rng.standard_normal((12, 10))
    Y[:, 0] = Y[:, 1] + Y[:, 2]                          # on a hyperplane: rank d (rounded)
    res = count_dichotomies(Y)
    assert not res.closed_form and not res.general_position
    assert res.P == cover(12, 9) == 4072                 # generic within that hyperplane


def test_a_count_beyond_the_limit_is_refused_in_one_line(tmp_path, capsys):
    """A degenerate set (no closed form) whose count takes seconds on any machine (bound
    ~1e8 regions) is refused after the 0.25 s probe, with the bound and the time."""
    from analysis.dichotomies import TooManyRegions
    rng = np.random.default_rng(13)
    X = rng.standard_normal((60, 6))
    X[1] = X[0]
    with pytest.raises(TooManyRegions) as e:
        count_dichotomies(X, max_regions=10**5)
    assert e.value.bound == cover(59, 6) and e.value.seconds > 0
    path = tmp_path / "deg.npy"
    np.save(path, np.c_[X, np.zeros(60)])
    assert cli_main(["dichotomies", str(path), "--max-regions", "1e5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"meanfield: error: {path}: --max-regions: counting P would "
                             f"enumerate up to {cover(59, 6):.3g} regions")
    assert " s at " in err[0] and "regions/s" in err[0] and "raise --max-regions" in err[0]
    assert cli_main(["dichotomies", str(path), "--max-regions", "0"]) == 2
    assert capsys.readouterr().err.startswith("meanfield: error: --max-regions: must be >= 1")
    # a small degenerate set over the same limit ends within the probe: counted
    small = tmp_path / "small.npy"
    np.save(small, np.c_[X[:12, :3], np.zeros(12)])
    assert cli_main(["dichotomies", str(small), "--max-regions", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["P"] == count_dichotomies(X[:12, :3]).P


def test_analyze_refuses_a_count_beyond_the_limit_and_leaves_nothing(tmp_path, capsys):
    from conftest import tiny_toml
    cfg = tmp_path / "wide.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "gaussian", "n": 60, "d": 6, "seed": 1},
                              "model.n_particles": 16, "dynamics.steps_per_tau": 20,
                              "output.observe_every": 10, "output.snapshots_per_tau": 1}))
    run = tmp_path / "wide.h5"
    assert cli_main(["run", str(cfg), "-o", str(run), "--quiet", "--threads", "1"]) == 0
    capsys.readouterr()
    rep = tmp_path / "rep"
    assert cli_main(["analyze", str(run), "-o", str(rep), "--max-regions", "1e5", "--quiet",
                     "--no-references", "--no-figures"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meanfield: error: {run}: --max-regions: "
                                               "counting P would enumerate up to "), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wide.h5", "wide.toml"]


def test_the_exact_mode_is_refused_below_the_float_limit():
    from analysis.dichotomies import EXACT_SLOWDOWN, TooManyRegions
    X = np.random.default_rng(14).standard_normal((30, 4))
    limit = cover(30, 4) * EXACT_SLOWDOWN - 1
    with pytest.raises(TooManyRegions, match="exact mode"):
        count_dichotomies(X, exact=True, max_regions=limit)
    assert count_dichotomies(X, exact=True, max_regions=limit + 1).P == cover(30, 4)


def test_the_enumeration_reports_progress_in_slices(monkeypatch):
    import analysis.dichotomies as dm
    monkeypatch.setattr(dm, "SLICE_SECONDS", 1e-4)        # many short slices
    X = np.random.default_rng(15).standard_normal((30, 5))
    X[1] = X[0]
    seen = []
    res = count_dichotomies(X, progress=lambda done, bound: seen.append((done, bound)))
    assert len(seen) > 5
    assert all(b == cover(29, 5) for _, b in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == res.P


def test_sigterm_stops_a_long_enumeration_at_once(tmp_path):
    """A count of tens of seconds (the kernel in slices of about 0.2 s): SIGTERM ends it within
    2 s with exit 130 and one line, as every other command (tests/faults)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    X = np.random.default_rng(16).standard_normal((60, 8))
    X[1] = X[0]                              # no closed form; bound cover(59, 8) ~ 3e9 regions
    path = tmp_path / "long.npy"
    np.save(path, np.c_[X, np.zeros(60)])
    p = subprocess.Popen([sys.executable, "-m", "meanfield", "dichotomies", str(path),
                          "--max-regions", "1e12"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env={**os.environ, "COLUMNS": "80"})
    try:
        line = p.stderr.readline()           # the note when progress starts (after 2 s)
        assert line.startswith("meanfield: counting P: up to "), line
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert took < 2.0, took
    assert err.strip().splitlines()[-1] == "meanfield: terminated by SIGTERM"
    assert "Traceback" not in err
