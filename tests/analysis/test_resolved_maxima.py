"""Local maxima of |G| that the residuals cannot resolve (analysis.certificate_maxima.
resolved_maxima): the dip between two hills against its closed form, the join rule against
the dip's standard error, that standard error against the closed form of independent rows,
and the particles' rays with and without the residuals' noise.

The data: two points in d = 1 with positive residuals. The first alone gives
``G(φ) = cos(φ − ψ₁)`` (``λ = 1``, ``R₁|x̃₁| = 1``); the second's hyperplane crosses the circle
at ``φ_b = ψ₁ + δ`` and adds ``3δ sin(φ − φ_b)`` on its active side, a convex kink. So ``G``
has a hill at ``ψ₁`` (value 1), a higher one beyond ``φ_b``, and between them a dip of exactly
``1 − cos δ`` at ``φ_b``.
"""

import math

import numpy as np
import pytest

from analysis.certificate import certificate
from analysis.certificate_maxima import (
    DIP_Z,
    arc_minimum,
    cell_maxima_of,
    maxima_of,
    residual_dip_se,
    resolved_maxima,
)
from analysis.rays import find_rays

PSI1 = math.pi / 4


def _two_hills(delta):
    psi2 = PSI1 + delta + math.pi / 2          # x̃₂'s direction: its hyperplane at ψ₁ + δ
    X = np.array([[1.0 / math.tan(PSI1)], [math.cos(psi2) / math.sin(psi2)]])
    n1, n2 = np.hypot(X[:, 0], 1.0)
    R = np.array([1.0 / n1, 3.0 * delta / n2])
    return X, R


def _on_circle(phi):
    return np.array([math.cos(phi), math.sin(phi)])


def _hills(X, R):
    M = maxima_of(cell_maxima_of(R, X, 1.0))
    top = [k for k, (v, s, _) in enumerate(M) if s == 1 and certificate(v[None], X, R, 1.0)[0] > 0.9]
    low, high = sorted(top, key=lambda k: certificate(M[k][0][None], X, R, 1.0)[0])
    return M, low, high


@pytest.mark.parametrize("delta", [0.005, 0.02, 0.1])
def test_the_two_hills_and_the_dip_between_them_have_their_closed_forms(delta):
    X, R = _two_hills(delta)
    M, low, high = _hills(X, R)
    assert np.allclose(M[low][0], _on_circle(PSI1), atol=1e-9)
    # the higher hill: (1 − 3δ sin δ) cos u + 3δ cos δ sin u, u = φ − ψ₁
    A, B = 1.0 - 3.0 * delta * math.sin(delta), 3.0 * delta * math.cos(delta)
    assert certificate(M[high][0][None], X, R, 1.0)[0] == pytest.approx(math.hypot(A, B),
                                                                         rel=1e-12)
    assert np.allclose(M[high][0], _on_circle(PSI1 + math.atan2(B, A)), atol=1e-9)
    value, where = arc_minimum(M[low][0], M[high][0], 1, X, R, 1.0)
    assert value == pytest.approx(math.cos(delta), rel=1e-13)
    assert np.allclose(where, _on_circle(PSI1 + delta), atol=1e-12)


def test_exact_residuals_keep_every_hill_with_a_dip():
    X, R = _two_hills(0.005)                  # a dip of 1.25e-5
    M, low, high = _hills(X, R)
    assert list(resolved_maxima(M, X, R, 1.0)) == list(range(len(M)))


@pytest.mark.parametrize("factor, joins", [(1.01, True), (0.99, False)])
def test_a_hill_joins_its_higher_neighbour_when_its_dip_is_within_z_standard_errors(factor,
                                                                                      joins):
    delta = 0.02
    X, R = _two_hills(delta)
    M, low, high = _hills(X, R)
    dip = 1.0 - math.cos(delta)
    parent = resolved_maxima(M, X, R, 1.0,
                             dip_se=lambda C: np.full(len(C), factor * dip / DIP_Z))
    assert bool(parent[low] == high) is joins
    assert parent[high] == high


def test_the_dip_standard_error_of_independent_rows_matches_its_closed_form():
    rng = np.random.default_rng(4)
    n, M, chains, lam = 5, 20_000, 3, 0.05
    A = rng.standard_normal((n, n))
    cov = A @ A.T / n
    series = [rng.multivariate_normal(np.zeros(n), cov, size=M) for _ in range(chains)]
    C = rng.standard_normal((4, n))
    want = np.sqrt(np.einsum("ij,jk,ik->i", C, cov, C) / M / chains) / lam
    got = residual_dip_se(series, lam)(C)
    assert np.allclose(got, want, rtol=0.08)


def _particles(X, R, M, low, high, rng):
    # 40 heavy particles with a < 0 (G > 0) on each hill, jittered by 2e-3 rad
    rows = []
    for k in (low, high):
        phi = math.atan2(M[k][0][1], M[k][0][0]) + 2e-3 * rng.standard_normal(40)
        u = np.stack([np.cos(phi), np.sin(phi)], axis=1)
        rows.append(np.column_stack([-np.ones(40), u]))
    return np.vstack(rows)


# The dip is ``R₁|x̃₁|(1 − cos δ)``, so it is resolved when ``R₁`` (0.71) is known to better than
# a part in ``1 − cos δ``'s own: its standard error is ``noise·|x̃₁|(1 − cos δ)/√400``, z = 14/noise.
@pytest.mark.parametrize("noise, J", [(1.0, 2), (10.0, 1)])
def test_particles_on_two_hills_are_one_ray_when_the_residuals_cannot_tell_them_apart(noise, J):
    rng = np.random.default_rng(0)
    X, R = _two_hills(0.02)
    M, low, high = _hills(X, R)
    theta = _particles(X, R, M, low, high, rng)
    E = noise * rng.standard_normal((400, 2))
    series = [R + E - E.mean(axis=0)]          # the time average is R exactly
    kw = dict(lam=1.0, tau=1e-6, R=R, weight_scale=1.0, rule="basins")
    res = find_rays(theta, X, R_series=series, **kw)
    assert len(res.rays) == J
    low_joins = [j for j in res.joined if np.allclose(j["direction"], M[low][0])]
    assert len(low_joins) == 2 - J
    if J == 1:
        assert res.rays[0].mass_fraction == pytest.approx(1.0)
        assert np.allclose(low_joins[0]["joins"], M[high][0])
    # without the series only a hill with no dip would join: both are rays
    assert len(find_rays(theta, X, **kw).rays) == 2


@pytest.mark.parametrize("series, match", [
    ([np.zeros((5, 3))], r"R_series\[0\] has shape \(5, 3\)"),
    ([np.zeros((0, 2))], r"at least one row"),
    ([np.zeros(2)], r"R_series\[0\] has shape \(2,\)"),
    ([np.full((4, 2), np.nan)], "non-finite"),
])
def test_residual_series_that_cannot_be_the_observations_of_R_are_refused(series, match):
    X, R = _two_hills(0.02)
    theta = np.array([[-1.0, 0.7, 0.7]])
    with pytest.raises(ValueError, match=match):
        find_rays(theta, X, lam=1.0, tau=1e-6, R=R, weight_scale=1.0, R_series=series)
    with pytest.raises(ValueError, match="R_series needs R"):
        find_rays(theta, X, lam=1.0, y=np.zeros(2), R_series=[np.zeros((3, 2))])


def test_degenerate_arcs_and_dip_errors_are_refused_or_join_nothing():
    X, R = _two_hills(0.02)
    M, low, high = _hills(X, R)
    e = M[low][0]
    for P, Q in ((e, e), (e, -e)):
        with pytest.raises(ValueError, match="equal or antipodal"):
            arc_minimum(P, Q, 1, X, R, 1.0)
    with pytest.raises(ValueError, match="unit vector"):
        arc_minimum(2 * e, M[high][0], 1, X, R, 1.0)
    with pytest.raises(ValueError, match="s must be"):
        arc_minimum(e, M[high][0], 0, X, R, 1.0)
    with pytest.raises(ValueError, match="dip_se returned shape"):
        resolved_maxima(M, X, R, 1.0, dip_se=lambda C: np.ones(1))
    with pytest.raises(ValueError, match="z must be"):
        resolved_maxima(M, X, R, 1.0, z=-1.0)
    # an unknown error joins nothing: a window too short for an MCSE, or nan
    assert list(resolved_maxima(M, X, R, 1.0, dip_se=lambda C: np.full(len(C), np.nan))) \
        == list(range(len(M)))
    short = residual_dip_se([np.tile(R, (7, 1)) + 5.0], 1.0)
    assert np.all(np.isnan(short(np.ones((3, 2)))))
    assert np.all(np.isnan(residual_dip_se([], 1.0)(np.ones((2, 2)))))


def test_residual_series_whose_mean_is_not_R_or_empty_are_refused():
    X, R = _two_hills(0.02)
    theta = np.array([[-1.0, 0.7, 0.7]])
    kw = dict(lam=1.0, tau=1e-6, R=R, weight_scale=1.0)
    with pytest.raises(ValueError, match="R_series is empty"):
        find_rays(theta, X, R_series=[], **kw)
    with pytest.raises(ValueError, match="not the mean of R_series"):
        find_rays(theta, X, R_series=[np.tile(R + 5.0, (10, 1))], **kw)


def test_the_gibbs_note_says_when_a_stage_is_short_of_particles_for_a_ray():
    """A stage whose pooled analysis refused a heavy certified cluster only for its number of
    particles says so beside the Gibbs counts (a newcomer saw J = 1 against the Gibbs 2 and
    no reason)."""
    from types import SimpleNamespace

    from analysis.run_analysis import LadderRow, gibbs_ladder
    X = np.linspace(-1.0, 1.0, 9)[:, None]
    y = np.array([1.0, 0.2, 0.6, 0.1, 0.9, 0.1, 0.6, 0.2, 1.0])
    run = SimpleNamespace(X=X, y=y, lam=0.01, d=1)
    small = {"direction": [0.6, 0.8], "sign": 1, "mass_fraction": 0.215, "n_particles": 138,
             "G": -0.9}
    res = SimpleNamespace(rays=[], small=[small], min_particles=144, replicas=12,
                          rule="basins")
    row = LadderRow(stage=0, tau=1e-3, step=10, J=0, K=0, risk=0.1, halo_mass_fraction=1.0)
    gibbs_ladder(run, [row], [SimpleNamespace(stage=0, rays=res)])
    assert row.J_gibbs is not None
    assert ("N too small: particle cluster(s) refused only for holding fewer than 144 pooled "
            "particles (12 per snapshot): (0.600, 0.800) mass 0.215 in 138") in row.gibbs_note


def test_misused_arcs_and_dip_errors_say_what_is_wrong():
    X, R = _two_hills(0.02)
    M, low, high = _hills(X, R)
    P, Q = M[low][0], M[high][0]
    with pytest.raises(ValueError, match="length d\\+1 = 2"):
        arc_minimum(np.r_[P, 0.0], Q, 1, X, R, 1.0)
    with pytest.raises(ValueError, match="points must be at least 2"):
        arc_minimum(P, Q, 1, X, R, 1.0, points=1)
    # with two points both ends are still evaluated: from P toward (1, 0), G falls all the way
    far = np.array([1.0, 0.0])
    assert arc_minimum(P, far, 1, X, R, 1.0, points=2)[0] == pytest.approx(
        min(certificate(np.array([P, far]), X, R, 1.0)))
    with pytest.raises(ValueError, match="s must be"):
        arc_minimum(P, Q, np.array([1, 1]), X, R, 1.0)
    with pytest.raises(ValueError, match="list of arrays"):
        residual_dip_se(np.zeros((10, 2)), 1.0)
    with pytest.raises(ValueError, match="lam must be"):
        residual_dip_se([np.zeros((10, 2))], 0.0)
    with pytest.raises(ValueError, match="C has 3 columns"):
        residual_dip_se([np.zeros((10, 2))], 1.0)(np.ones((1, 3)))
