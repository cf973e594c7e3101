"""[LJM26] Proposition 7 closed forms (THEORY §8) against a convex solve of the τ → 0 problem."""

import numpy as np
import pytest
import qpsolvers
from scipy import sparse

from analysis.two_point import compare, detect, measured_kinks, predict
from solvers.geometry import Kink


def convex_two_point(s, ybar, lam, labels, m=3600):
    """Oracle: the τ → 0 problem of THEORY §4 for d = 1, x = ±s, over m directions on the
    circle, min (1/2n)|f − y|² + λ|μ|_1 with f = A μ, solved as a QP (Clarabel)."""
    th = np.linspace(-np.pi, np.pi, m, endpoint=False)
    V = np.c_[np.cos(th), np.sin(th)]
    A = np.maximum(np.array([[s, 1.0], [-s, 1.0]]) @ V.T, 0.0)
    y = np.array([ybar, ybar if labels == "even" else -ybar])
    n = 2
    P = sparse.block_diag([sparse.csc_matrix((2 * m, 2 * m)), sparse.eye(n) / n], format="csc")
    q = np.r_[lam * np.ones(2 * m), -y / n]
    Aeq = sparse.csc_matrix(np.hstack([A, -A, -np.eye(n)]))
    lb = np.r_[np.zeros(2 * m), -np.inf * np.ones(n)]
    z = qpsolvers.solve_qp(P, q, A=Aeq, b=np.zeros(n), lb=lb, solver="clarabel",
                           tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    mu = z[:m] - z[m:2 * m]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = -s * V[:, 1] / V[:, 0]                  # kink ⟨x̄, x⟩ = s x = c of (w, b)
    return z[2 * m:], mu, c, np.abs(V[:, 0])


@pytest.mark.parametrize("labels,s,lam", [("even", 1.0, 0.05), ("even", 1.0, 0.2),
                                          ("even", 2.5, 0.05), ("even", 2.5, 0.2),
                                          ("odd", 0.5, 0.05), ("odd", 2.0, 0.2),
                                          ("even", 1.0, 1.2), ("odd", 2.0, 1.5)])
def test_closed_forms_match_the_convex_problem(labels, s, lam):
    f, mu, c, aw = convex_two_point(s, 1.0, lam, labels)
    p = predict(s, 1.0, lam, labels)
    assert np.abs(f).mean() == pytest.approx(p["phi"], abs=2e-4)
    tot = np.abs(mu).sum()
    if p["zero"]:
        assert tot < 1e-6 and not p["kinks"]
        return
    if p["kinks"]:
        near = np.min(np.abs(c[:, None] - np.array(p["kinks"])[None]), axis=1) < 0.01
    else:                                            # constant predictor: pure-bias direction
        near = aw < 0.01
    assert np.abs(mu)[near].sum() / tot > 0.999


def test_detect():
    xb = np.array([1.0, -2.0])
    assert detect(np.array([xb, -xb]), [0.5, 0.5]) == "even"
    assert detect(np.array([xb, -xb]), [0.5, -0.5]) == "odd"
    assert detect(np.array([xb, -xb]), [0.5, 0.3]) is None
    assert detect(np.array([xb, -xb + 0.1]), [0.5, 0.5]) is None
    assert detect(np.array([xb, -xb, xb]), [0.5, 0.5, 0.5]) is None


def test_prediction_details():
    p = predict(0.5, -2.0, 0.1, "odd")
    assert p["kinks"] == pytest.approx([-0.25, 0.25])         # ±s², through the data points
    assert p["kappa"] == pytest.approx(1.0 / np.sqrt(1.25))
    assert p["phi"] == pytest.approx(2.0 - 0.2 * np.sqrt(1.25))
    assert predict(np.sqrt(3.0), 1.0, 0.1, "even")["ambiguous"]
    with pytest.raises(ValueError):
        predict(1.0, 1.0, 0.1, "other")


def test_measured_kinks_in_the_frame_of_xbar():
    xbar = np.array([0.0, 2.0])
    ks = [Kink(np.array([0.0, 1.0]), 0.5, [0]),      # x2 = 0.5  ->  ⟨x̄, x⟩ = 1
          Kink(np.array([0.0, -1.0]), 0.5, [1]),     # x2 = -0.5 ->  ⟨x̄, x⟩ = -1
          Kink(np.array([1.0, 0.0]), 0.2, [2])]      # off axis
    on, off = measured_kinks(ks, xbar)
    assert on == pytest.approx([-1.0, 1.0]) and off == 1
    r = compare(np.array([xbar, -xbar]), np.array([1.0, 1.0]), 0.05, ks, [0.9, 0.9])
    assert r["labels"] == "even" and r["predicted"]["kinks"] == [-1.0, 1.0]
    assert r["measured"] == {"kinks": pytest.approx([-1.0, 1.0]), "off_axis": 1, "phi": 0.9}
