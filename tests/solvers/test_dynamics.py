"""Oracles for the particle dynamics (THEORY §2): Ornstein–Uhlenbeck variance, drift as the
N-scaled gradient of the N-particle objective, numba step vs NumPy reference, two-point kinks."""

import numpy as np
import pytest

from meanfield import config, data
from meanfield.runner import integrate
from solvers import numpy_model as model
from solvers.langevin import initial_particles
from solvers.stepper import Stepper


def _objective(theta, X, y, lam):
    """½ R(θ_1..θ_N) + (λ/2N) Σ_i |θ_i|² (THEORY §1–2)."""
    return 0.5 * model.risk(theta, X, y) + 0.5 * lam * np.sum(theta ** 2) / theta.shape[0]


def test_drift_is_N_times_gradient_of_objective():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((5, 2))
    y = rng.standard_normal(5)
    theta = rng.standard_normal((7, 4))
    lam = 0.3
    g = model.drift(theta, X, y, lam)
    h = 1e-6
    fd = np.zeros_like(theta)
    for i in range(theta.shape[0]):
        for k in range(theta.shape[1]):
            tp, tm = theta.copy(), theta.copy()
            tp[i, k] += h
            tm[i, k] -= h
            fd[i, k] = (_objective(tp, X, y, lam) - _objective(tm, X, y, lam)) / (2 * h)
    np.testing.assert_allclose(g, theta.shape[0] * fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("tau", [0.0, 0.02])
def test_numba_step_equals_numpy_reference(tau):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((9, 3))
    y = rng.standard_normal(9)
    N = 1300                           # several reduction blocks, one partial
    theta = initial_particles(N, 3, 1.0, 5)
    lam, eta, seed, step = 0.07, 0.03, 11, 42
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=seed)
    th = theta.copy()
    assert st.advance(th, tau, step, 1) == 0
    ref = model.euler_maruyama_step(theta, X, y, lam, eta, tau, st.noise(step))
    np.testing.assert_allclose(th, ref, rtol=0, atol=1e-13)
    # and the residuals returned after the step are those of the new particles
    np.testing.assert_allclose(st.R, model.residuals(th, X, y), atol=1e-15)


OU_CASES = [("em", 0.05, 0.05), ("em", 1.0, 0.5), ("em", 1.0, 1.0), ("lm", 0.05, 0.05),
            ("lm", 1.0, 0.5), ("lm", 1.0, 1.0), ("lm", 1.0, 1.5), ("lm", 1.0, 1.9)]


@pytest.mark.parametrize("integrator,lam,eta", OU_CASES)
def test_ornstein_uhlenbeck_stationary_variance(integrator, lam, eta):
    """Data term off (R = 0): Euler–Maruyama, θ ← (1−ηλ)θ + sqrt(2ητ)ξ_k, has variance
    τ/(λ(1−ηλ/2)); Leimkuhler–Matthews, θ ← (1−ηλ)θ + sqrt(2ητ)(ξ_k + ξ_{k+1})/2, has τ/λ
    at every stable ηλ < 2.

    With ηλ >= 0.5 the two values differ by >= 33 %, far outside the sampling error, so each
    test also rejects the other integrator's formula.
    """
    N, d, tau = 20000, 2, 0.01
    X = np.zeros((1, d))
    theta = initial_particles(N, d, 0.1, 3)
    q = abs(1 - eta * lam)                      # contraction per step
    # the variance forgets the start as q^(2·nsteps) (both integrators), so nsteps with
    # q^(2·nsteps) <= e^-24 leave it 1e-10 of its start; the mean, as q^nsteps <= e^-12
    nsteps = 2 + (int(12 / -np.log(q)) if q > 0 else 0)
    st = Stepper(X, np.zeros(1), N, lam=lam, eta=eta, seed=7, integrator=integrator)
    assert st.advance(theta, tau, 0, nsteps, data_term=False) == 0
    want = model.ou_stationary_variance(lam, eta, tau, integrator)
    other = model.ou_stationary_variance(lam, eta, tau, "em" if integrator == "lm" else "lm")
    var = theta.var(axis=0)
    # sample variance of N Gaussians: relative standard error sqrt(2/N) = 1 %; allow 4 sigma
    rse = np.sqrt(2 / N)
    np.testing.assert_allclose(var, want, rtol=4 * rse)
    if eta * lam >= 0.5:
        assert np.all(np.abs(var / other - 1) > 8 * rse)
    np.testing.assert_allclose(theta.mean(axis=0), 0, atol=4 * np.sqrt(want / N))


def test_two_point_even_kinks_at_plus_minus_one():
    """THEORY §8: d = 2, even labels, |x̄| = 2.5 > sqrt 3, λ = 0.05: kinks at ⟨x̄, x⟩ = ±1 and
    fitted value φ = ȳ − 2λ/κ with κ = sqrt(1 + s²)."""
    from analysis.rays import find_rays
    from solvers.geometry import kink_hyperplanes
    cfg = config.from_dict({
        "data": {"kind": "two_point", "d": 2, "norm": 2.5, "labels": "even", "y": 1.0},
        "model": {"n_particles": 1000},
        "dynamics": {"lam": 0.05, "eta": 0.05, "taus": [1e-3, 1e-4], "steps_per_tau": 20000},
        "output": {"observe_every": 1000}})
    ds = data.from_config(cfg)
    st = integrate(cfg, ds, progress=False)
    res = find_rays(st.theta, ds.X)
    kinks = kink_hyperplanes([r.direction for r in res.rays])
    s = 2.5
    xbar = ds.X[0] / s
    positions = sorted(k.offset * s * float(k.normal @ xbar) for k in kinks)
    assert len(positions) == 2
    np.testing.assert_allclose(positions, [-1.0, 1.0], atol=0.05)
    for k in kinks:
        assert abs(abs(float(k.normal @ xbar)) - 1) < 1e-3
    phi = 1.0 - 2 * 0.05 / np.sqrt(1 + s * s)
    np.testing.assert_allclose(model.predict(st.theta, ds.X), [phi, phi], atol=0.01)


def test_runaway_particles_stop_as_divergence():
    """A step size past the stability limit can grow |θ| for many steps before anything
    overflows; the run must stop as soon as the mean squared norm leaves its scale, not only on
    NaN/Inf (eta = 3 on this set: the NaN check alone lets it run on). A full-batch run stops
    earlier still, at the first observation whose step is unstable on the data mode; the
    runaway bound is what stops a minibatch run (here B = n, the same drift)."""
    from meanfield.errors import DivergenceError
    from solvers.errors import UnstableStepError
    from solvers.langevin import RUNAWAY_FACTOR, second_moment_scale
    cfg = config.from_dict({
        "data": {"kind": "two_point", "d": 1, "norm": 1.0},
        "model": {"n_particles": 64},
        "dynamics": {"lam": 0.05, "eta": 0.25, "taus": [1e-3], "steps_per_tau": 16000},
        "output": {"observe_every": 10}})
    ds = data.from_config(cfg)
    cfg_bad = config.from_dict({**cfg.as_dict(),
                                "dynamics": {**cfg.as_dict()["dynamics"], "eta": 3.0}})
    with pytest.raises(UnstableStepError, match="unstable step"):
        integrate(cfg_bad, ds, progress=False)
    cfg_bad = config.from_dict({**cfg.as_dict(), "dynamics": {
        **cfg.as_dict()["dynamics"], "eta": 3.0, "batch_size": ds.n}})
    with pytest.raises(DivergenceError, match="ran away"):
        integrate(cfg_bad, ds, progress=False)
    # a healthy run (same time span, eta below the data mode's limit 2/h) stays far below
    # the bound
    st = integrate(cfg, ds, progress=False)
    msq = float(np.mean(np.sum(st.theta ** 2, axis=1)))
    assert msq < 1e-3 * RUNAWAY_FACTOR * second_moment_scale(cfg.dynamics.lam, cfg.model.init_scale, cfg.taus, ds.y,
                                                        ds.d)


def test_running_sums_give_the_windows_drift_of_the_plain_means():
    """``stationarity`` with running sums, extended one observation at a time as a run does,
    equals the plain means of the two windows at every length (and nan below 4)."""
    from solvers.langevin import stationarity
    rng = np.random.default_rng(3)
    rows = list(rng.normal(size=(57, 3)) + np.linspace(0, 1, 57)[:, None])
    prefix: list = []
    for m in range(1, len(rows) + 1):
        hist = rows[:m]
        got = stationarity(hist, prefix)
        assert len(prefix) == m + 1
        if m < 4:
            assert got != got
            continue
        H = np.asarray(hist[m // 2:])
        k = len(H) // 2
        want = 3 * np.max(np.abs(H[-k:].mean(axis=0) - H[:k].mean(axis=0)))
        assert got == pytest.approx(want, rel=1e-12, abs=1e-14)
        assert stationarity(hist) == pytest.approx(want, rel=1e-12)


def test_a_run_observing_every_step_has_the_stationarity_of_its_residuals(tmp_path):
    """The observable written by a run is the windows' drift of its own stored residuals."""
    from solvers.langevin import stationarity
    X = np.array([[-1.0], [0.5], [1.0]])
    y = np.array([0.3, -0.2, 0.4])
    from solvers.langevin import initial_state, simulate
    from solvers.schedule import Schedule
    st = Stepper(X, y, 50, lam=0.1, eta=0.05, seed=2)
    out = [o for _, o, _ in simulate(st, Schedule([1e-2], 300, 3, 1), initial_state(50, 1, 1.0, 2),
                                     init_scale=1.0) if o is not None]
    R = [o.residuals for o in out]
    values = [o.stationarity for o in out]
    assert len(R) == 100
    for m in (4, 37, 100):
        assert values[m - 1] == pytest.approx(stationarity(R[:m]), rel=1e-10)
