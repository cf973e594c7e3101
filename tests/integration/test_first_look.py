"""The first look (``data/first_look.toml``, also the README's Python example): its run passes the
stationarity verdict at every temperature, and its counts equal the convex ``τ → 0`` limit's and
[LJM26] Proposition 7's closed form (the README's printed lines: tests/integration/test_readme.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.long
@pytest.mark.slow
def test_first_look_is_stationary_and_matches_the_limits(tmp_path):
    done = run_cli(["run", REPO / "data" / "first_look.toml", "-o", "first.h5", "--quiet"],
                   tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr
    out = run_cli(["analyze", "first.h5", "--no-figures"], tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr
    rep = json.loads((tmp_path / "first-report" / "report.json").read_text())
    assert all(r["stationary"] for r in rep["ladder"])
    cc = rep["convex_counts"]
    assert [(r["J"], r["K"]) for r in rep["ladder"]] == [(cc["J"], cc["K"])] * 3
    assert all(r["chains_agree"] for r in rep["ladder"])
    # Proposition 7's closed form (docs/theory.md §8), written out here: s = 2.5 > √3, even
    # labels: kinks <x_1, x> = ±1, fitted value 1 − 2λ/κ with κ = max(2, sqrt(1 + s²))
    phi = 1.0 - 2 * 0.05 / max(2.0, math.sqrt(1 + 2.5 ** 2))
    cold = rep["two_point"][-1]["measured"]
    assert len(cold["kinks"]) == 2
    assert max(abs(a - b) for a, b in zip(sorted(cold["kinks"]), [-1.0, 1.0])) < 0.05
    assert abs(cold["phi"] - phi) < 5e-3
