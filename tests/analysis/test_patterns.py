"""Ternary patterns and the [LJM26] Theorem 6 checks (THEORY §7)."""

import itertools

import numpy as np
import pytest

from analysis.ternary import (
    PatternTolerance,
    bounds,
    precedes,
    ray_pattern,
    ternary_pattern,
    theorem6,
)

X = np.array([[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4], [0.2, 0.1]])


def test_precedes_definition():
    assert precedes([0, 1, -1], [1, 1, -1])
    assert precedes([0, 0, 0], [-1, 1, 1])
    assert not precedes([1, 1, -1], [0, 1, -1])
    assert not precedes([0, -1, 1], [1, 1, 1])
    assert precedes([1, -1], [1, -1])


def test_ternary_pattern_zero_through_a_point_and_margin():
    x = X[1]
    # kink through x_1: w·x + b = 0 with w = (1, 2)
    w = np.array([1.0, 2.0])
    v = np.r_[w, -w @ x]
    t, margin = ternary_pattern(v, X)
    Xl = np.c_[X, np.ones(len(X))]
    z = Xl @ v
    assert t[1] == 0
    assert np.array_equal(np.delete(t, 1), np.sign(np.delete(z, 1)))
    expect = np.min(np.abs(np.delete(z, 1)) / np.linalg.norm(np.delete(Xl, 1, axis=0), axis=1))
    assert margin == pytest.approx(expect / np.linalg.norm(v))
    # moving the kink off x_1 by more than the tolerance makes the entry non-zero
    v_off = v + np.r_[0.0, 0.0, 0.05]
    assert ternary_pattern(v_off, X, angle_tol=1e-3)[0][1] == 1
    assert ternary_pattern(v_off, X, angle_tol=0.1)[0][1] == 0


def test_ray_pattern_straddling_mass():
    v = np.array([1.0, 2.0, 0.0])
    v = np.r_[v[:2], -v[:2] @ X[1]]
    v /= np.linalg.norm(v)
    # particles displaced off the hyperplane of x̃_1 to both sides, 30 % on the minority side
    n1 = np.r_[X[1], 1.0] / np.linalg.norm(np.r_[X[1], 1.0])
    side = np.r_[np.ones(7), -np.ones(3)]
    Vm = v + 0.05 * side[:, None] * n1
    Vm /= np.linalg.norm(Vm, axis=1, keepdims=True)
    mean = Vm.mean(axis=0)
    mean /= np.linalg.norm(mean)
    tight = PatternTolerance(angle_tol=1e-6, mass_tol=0.1)
    t, info = ray_pattern(mean, Vm, np.ones(10), X, tight)
    assert t[1] == 0 and info["straddle"][1] == pytest.approx(0.3)
    t2, _ = ray_pattern(mean, Vm, np.ones(10), X, PatternTolerance(1e-6, mass_tol=0.4))
    assert t2[1] != 0


def test_theorem6_accepts_an_antichain():
    pats = [[1, -1, 1, 0], [-1, 1, 0, 1], [1, 1, -1, -1]]
    r = theorem6(pats)
    assert r["distinct"] and r["antichain"] and r["at_most_two_per_binary"]
    assert r["duplicates"] == [] and r["comparable"] == []


def test_theorem6_flags_a_duplicated_pattern():
    pats = [[1, -1, 1, 0], [-1, 1, 0, 1], [1, -1, 1, 0]]
    r = theorem6(pats)
    assert not r["distinct"] and r["duplicates"] == [[0, 2]]
    assert not r["antichain"]


def test_theorem6_flags_a_comparable_pair():
    pats = [[1, 0, -1, 1], [-1, -1, 1, 1], [1, 1, -1, 1]]      # t_0 ⪯ t_2
    r = theorem6(pats)
    assert r["distinct"]
    assert not r["antichain"] and r["comparable"] == [[0, 2]]


def test_theorem6_flags_three_below_one_binary_pattern():
    pats = [[1, 0, 0, -1], [0, 1, 0, -1], [1, 1, -1, 0], [-1, -1, 1, 1]]
    r = theorem6(pats)
    assert not r["at_most_two_per_binary"]
    assert r["max_per_binary"] == 3 and r["max_per_binary_rays"] == [0, 1, 2]
    s = r["binary_witness"]
    assert all(x in (-1, 1) for x in s)
    assert all(precedes(pats[k], s) for k in r["max_per_binary_rays"])


def test_max_per_binary_equals_brute_force_over_all_binary_patterns():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, J = 6, 9
        pats = rng.choice([-1, 0, 0, 1], size=(J, n))
        brute = max(sum(precedes(t, s) for t in pats)
                    for s in itertools.product([-1, 1], repeat=n))
        assert theorem6(pats)["max_per_binary"] == brute


def test_bounds():
    b = bounds(58, 4)
    assert b["bound_2P_minus_1"] == 115 and b["bound_P_minus_1"] == 57
    assert b["within_2P_minus_1"] and b["within_P_minus_1"]
    b = bounds(3, 4)
    assert b["within_2P_minus_1"] and not b["within_P_minus_1"]
