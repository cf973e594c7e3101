"""Oracles for the exchange move of ``integrator = "mala"`` (solvers._exchange): the masses
``t_i = |θ_i|²`` of two particles along fixed directions sampled by it, alone and with the radial
move, against the two-dimensional law ``∝ t_1^m t_2^m exp(−U/τ)`` by quadrature; the move
keeps the bits across cuts; it mixes the combination of masses that one-particle moves walk
along slowly; the Stepper refuses it where it does not apply.

The Langevin step is so small (``η = 1e-16``) that the directions stay where they start, as in
the radial-move tests of tests/solvers/test_mala.py: the chain of the masses is then that of the
exchange (and radial) moves alone.
"""

import numpy as np
import pytest

from analysis.convergence import diagnostics
from analysis.time_average import mean_and_mcse
from solvers._exchange import EXCHANGE_STIFF
from solvers.stepper import Stepper

X3 = np.array([[-1.0], [0.5], [1.5]])
LAM = 0.1


def _phi(omega):
    """``φ_j(ω) = ω_a relu(ω_w x_j + ω_b)``: a particle's output per unit ``t``."""
    omega = np.asarray(omega, float) / np.linalg.norm(omega)
    return omega[0] * np.maximum(omega[1] * X3[:, 0] + omega[2], 0.0)


def _targets(omegas, masses=(4.0, 4.0)):
    """Labels that two particles at ``omegas`` with these masses fit exactly (``N = 2``)."""
    return sum(t * _phi(o) for t, o in zip(masses, omegas)) / 2


def _two_mass_law(omegas, tau, one_cell, half_width=12.0, M=801):
    """Moments ``E t_1, E t_2, E t_1², E t_2², E t_1 t_2`` of ``p(t) ∝ t_1^m t_2^m exp(−U/τ)``
    (``N = 2``, ``m = 1/2``, ``U = 2 R + (λ/2)(t_1 + t_2)``, labels :func:`_targets`), by
    quadrature on a grid along the eigenvectors of the law's Gaussian approximation
    (``half_width`` standard deviations); the mass of the law where some cell would not be
    stiff (``κ <= EXCHANGE_STIFF``; ``one_cell``: the two particles are one cell); its mode."""
    Y3 = _targets(omegas)
    P = np.stack([_phi(o) for o in omegas])            # (2, n)
    n, N, m = len(Y3), 2, 0.5

    def logp(t):                                       # t (..., 2)
        f = t @ P / N
        U = N * 0.5 * np.mean((f - Y3) ** 2, axis=-1) + 0.5 * LAM * t.sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.all(t > 0, -1), m * np.log(np.abs(t)).sum(-1) - U / tau, -np.inf)

    H = P @ P.T / (n * N * tau)                        # Hessian of U/τ in t
    t = np.ones(2)
    for _ in range(200):                               # Newton on the log-concave law
        f = t @ P / N
        g = m / t - (P @ (f - Y3) / n + 0.5 * LAM) / tau
        Hs = H + np.diag(m / t ** 2)
        step = np.linalg.solve(Hs, g)
        while np.any(t + step <= 0):
            step /= 2
        t = t + step
    ev, V = np.linalg.eigh(H + np.diag(m / t ** 2))
    u = np.linspace(-half_width, half_width, M)
    U1, U2 = np.meshgrid(u, u, indexing="ij")
    pts = t + (U1[..., None] * V[:, 0] / np.sqrt(ev[0]) + U2[..., None] * V[:, 1] / np.sqrt(ev[1]))
    lw = logp(pts)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    t1, t2 = pts[..., 0], pts[..., 1]
    out = [t1[..., None] * P[0], t2[..., None] * P[1]]
    out = [out[0] + out[1]] if one_cell else out
    kap = np.stack([(o ** 2).sum(-1) for o in out]) / (n * N * tau)
    soft = float(w[np.any(kap <= EXCHANGE_STIFF, axis=0)].sum())
    mom = np.array([(w * q).sum() for q in (t1, t2, t1 * t1, t2 * t2, t1 * t2)])
    return mom, soft, t


def _mass_chain(omegas, tau, passes, radial, exchange, seed=3, t0=None):
    """``passes`` passes of two particles at ``omegas``; the masses after each, the counts."""
    om = np.array([np.asarray(o, float) / np.linalg.norm(o) for o in omegas])
    t0 = np.ones(2) if t0 is None else np.asarray(t0, float)
    theta = om * np.sqrt(t0)[:, None]
    st = Stepper(X3, _targets(omegas), 2, lam=LAM, eta=1e-16, seed=seed, integrator="mala", jumps=0.0,
                 radial=radial, fine=0.0, exchange=exchange)
    out = np.empty((passes, 2))
    chunk = 100
    for k in range(0, passes, chunk):
        for q in range(chunk):
            assert st.advance(theta, tau, k + q, 1) == 0
            out[k + q] = (theta ** 2).sum(1)
    np.testing.assert_allclose(theta / np.sqrt(out[-1])[:, None], om, atol=1e-6)
    return out, st.counts.copy()


def _moments(t):
    return np.column_stack([t[:, 0], t[:, 1], t[:, 0] ** 2, t[:, 1] ** 2, t[:, 0] * t[:, 1]])


# two cells (patterns 011 and 110): each scaled on its own
TWO_CELLS = [(1.0, 1.0, 0.5), (1.0, -1.0, 0.6)]
# one cell (same pattern and sign of a, directions apart): scaled together, shares kept
ONE_CELL = [(1.0, 1.0, 0.5), (1.0, 0.8, -0.2)]
TAU = 0.002


def test_two_cells_need_the_stiffness_the_test_assumes():
    """The law has no mass where a cell is not stiff, so the exchange move alone can sample
    it from a stiff start (the move never changes which cells are stiff)."""
    _, soft, mode = _two_mass_law(TWO_CELLS, TAU, False)
    assert soft < 1e-12 and np.all(mode > 0.5)


def test_exchange_alone_samples_the_law_of_two_cells():
    want, _, mode = _two_mass_law(TWO_CELLS, TAU, False)
    t, counts = _mass_chain(TWO_CELLS, TAU, 40000, radial=0.0, exchange=1.0, t0=mode * 1.05)
    assert counts[7] == 40000
    assert 0.3 < counts[8] / counts[7] < 1.0
    m, se, _ = mean_and_mcse(_moments(t)[2000:])
    assert np.all(np.abs(m - want) < 4 * se), (m, want, se)


def test_exchange_alone_scales_one_cell_by_the_law_of_its_mass():
    """One cell and no other move: the shares ``t_i/M`` stay as they started and the cell's
    mass ``M`` follows ``∝ M^{2m+1} exp(−U(M p)/τ)`` (volume ``t^m`` of each particle times
    the Jacobian ``M`` of ``t = M p``), by quadrature."""
    P = np.stack([_phi(o) for o in ONE_CELL])
    Y = _targets(ONE_CELL)
    share = np.array([0.7, 0.3])
    M = np.linspace(1e-6, 40.0, 400001)
    f = (M[:, None] * share) @ P / 2
    U = 2 * 0.5 * np.mean((f - Y) ** 2, axis=1) + 0.5 * LAM * M
    lw = 2.0 * np.log(M) - U / TAU                   # 2m + 1 = 2 for m = 1/2
    w = np.exp(lw - lw.max())
    want = np.array([(w * M).sum(), (w * M * M).sum()]) / w.sum()
    t, counts = _mass_chain(ONE_CELL, TAU, 40000, radial=0.0, exchange=1.0,
                            t0=share * want[0])
    np.testing.assert_allclose(t[:, 0] / t.sum(1), share[0], rtol=1e-5)   # Langevin at 1e-16
    assert 0.3 < counts[8] / counts[7] < 1.0
    Ms = t.sum(1)[2000:]
    m, se, _ = mean_and_mcse(np.column_stack([Ms, Ms * Ms]))
    assert np.all(np.abs(m - want) < 4 * se), (m, want, se)


@pytest.mark.parametrize("tau", [TAU, 0.06])
def test_exchange_with_radial_moves_samples_the_law_of_one_cell(tau):
    """One cell: the exchange move scales both particles together and the radial moves
    change the shares. At ``τ = 0.06`` the cell's stiffness straddles the threshold
    (the move is made only on part of the chain, and refused where it would cross)."""
    want, soft, _ = _two_mass_law(ONE_CELL, tau, True)
    if tau > TAU:
        assert 0.05 < soft < 0.95                     # the threshold matters here
    t, counts = _mass_chain(ONE_CELL, tau, 40000, radial=1.0, exchange=1.0)
    assert counts[8] > 0.05 * counts[7]
    m, se, _ = mean_and_mcse(_moments(t)[2000:])
    assert np.all(np.abs(m - want) < 4 * se), (m, want, se)


def test_exchange_mixes_what_radial_moves_walk_along():
    """Two cells whose outputs nearly coincide (the second particle also takes the first
    point, barely): the law of the masses is a narrow ridge along which the radial moves,
    one particle at a time, take steps of the ridge's width. The bulk ESS of ``t_1`` per
    pass is several times larger with exchange moves."""
    near = [(1.0, 1.0, 0.5), (1.0, 1.0, 1.02)]
    ess = {}
    for exchange in (0.0, 1.0):
        t, _ = _mass_chain(near, TAU, 20000, radial=1.0, exchange=exchange)
        _, bulk, _ = diagnostics(t[None, 2000:, 0][None])
        ess[exchange] = float(bulk[0])
    assert ess[1.0] > 4 * ess[0.0], ess         # measured: 6.8 times


def test_exchange_is_bitwise_across_cuts():
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((7, 2)), rng.standard_normal(7)
    theta0 = 3.0 * rng.standard_normal((40, 4))
    out = []
    for cuts in ((0, 30), (0, 7, 19, 30)):
        th = theta0.copy()
        st = Stepper(X, y, 40, lam=0.01, eta=0.05, seed=9, integrator="mala", fine=0.5,
                     exchange=1.0)
        for a, b in zip(cuts[:-1], cuts[1:]):
            assert st.advance(th, 0.1, a, b - a) == 0
        out.append((th, st.counts.copy()))
    assert out[0][1][7] == 30 and out[0][1][8] > 0
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


@pytest.mark.parametrize("kw,match", [
    ({"exchange": 1.5}, "exchange must be in"),
    ({"exchange": -0.1}, "exchange must be in"),
    ({"exchange": 1.0, "block": 4, "fine": 0.0}, "blocked pass"),
    ({"exchange": 1.0, "activation": "softplus"}, "needs ReLU"),
])
def test_stepper_refuses_exchange_where_it_does_not_apply(kw, match):
    with pytest.raises(ValueError, match=match):
        Stepper(X3, _targets(ONE_CELL), 4, lam=LAM, eta=0.1, integrator="mala", **kw)
