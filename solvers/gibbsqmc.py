"""Exact finite-temperature stationary measure in any input dimension, by randomized quasi-Monte
Carlo over the sphere of directions (THEORY §5; docs/theory.md, "Finite temperature").

The fixed point and its dual are those of :mod:`solvers.gibbs`: given the scaled residuals
``R`` (n,), ``G(v) = (1/λ) Σ_j R_j (v·x̃_j)_+``, the direction density is
``π_R(v) ∝ (1 − G(v)²)^{−(d+1)/2}`` on ``S^d`` and ``R`` maximises the concave dual
``D(R) = −τ log I(R) − R·y − (n/2)|R|²``. Only the sphere integrals change: instead of the
cell-wise quadrature of :mod:`solvers.spherequad` (``d ≤ 2``) they are importance-sampled.

Proposal: :mod:`solvers.qmcproposal` (a mixture of Cauchy and cone components at the peaks of
``|G|``, with an exact density).

Points, fixed point, error bar
------------------------------
Each component maps its own scrambled Sobol' points (``scipy.stats.qmc``, ``d + 1``
coordinates, through the normal quantile: ``N/|N|`` for the uniform component,
``t = L N_{1..d}/|N_{d+1}|`` for a Cauchy one) to ``S^d``. With one such sample fixed the
sample-average dual is still concave (a log-sum of exponentials of functions linear in ``R``)
and smooth; it is maximised by the damped Newton and the hot-to-cold continuation of
:class:`solvers.gibbs.GibbsReference` (sample average approximation), with the exact barrier
``max|G_R| < 1``. The proposal is rebuilt at the solution until its peaks stop moving; then
``K`` independent randomizations (new scrambles, same proposal) give ``K`` fixed points, whose
mean is the answer and whose standard error ``s_j/√K`` per data point is ``quad_error`` (its
maximum over ``j``). The bias of the sample average approximation is quadratic in the
integration error, far below the standard error. The number of points grows (up to
``max_points`` per randomization) until ``quad_error ≤ rtol · max_j |f_j|``; otherwise
:class:`GibbsAccuracyError`, naming the coldest temperature at which the accuracy was reached.

Source: THEORY §5 *(derived)*; Owen, *Monte Carlo theory, methods and examples* (2013), §9.13
(mixture importance sampling) and §17 (randomized QMC).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from solvers.activation_regions import TooManyPatterns, activation_patterns
from solvers.convex import cell_maxima
from solvers.gibbs import (
    GibbsConvergenceError,
    GibbsInputError,
    GibbsReference,
    GibbsSolution,
)
from solvers.qmcproposal import Peak, Proposal, build_proposal

_log = logging.getLogger(__name__)
_EPS = np.finfo(float).eps
#: Peaks with ``1 − G²`` above this are left to the uniform component.
PEAK_DELTA = 0.5
#: ... and so are peaks with ``δ`` more than this factor above the sharpest one.
PEAK_RANGE = 1e6
#: Radial tail exponent of the law across kinks (``1 − G²`` grows linearly there; the
#: against the barrier (:class:`GibbsBarrierError`): ``G`` itself carries a round-off of
#: ``~1e-15·Σ|R_j|φ_j/λ``, and Newton's steps then shrink ``δ`` without converging.
BARRIER_DELTA = 1e-8
#: Relative accuracy at which the coldest temperature below a barrier is searched (the barrier
#: does not depend on it; a refusal at rtol 1e-4 took over two minutes at d = 4 without it).
BARRIER_SEARCH_RTOL = 1e-3


class GibbsAccuracyError(RuntimeError):
    """The requested accuracy of ``f`` is out of reach at this temperature with the largest
    sample allowed.

    Attributes
    ----------
    tau : float          the temperature asked for
    error : float        the standard error reached (units of ``f``)
    target : float       the standard error asked for
    coldest : float or None
        The coldest temperature at which the accuracy was reached (None: none tried).
    solved : list of QMCGibbsSolution
        The temperatures of the ladder solved before this one, hot to cold (empty when the
        error came from the first), so a caller can keep them.
    """

    def __init__(self, tau, error, target, coldest, points, limit=None):
        self.tau, self.error, self.target, self.coldest = tau, error, target, coldest
        self.solved = []
        where = (f"the coldest temperature reached at this accuracy is tau={coldest:.3g}"
                 if coldest is not None else "no temperature tried reached it")
        size = (f"{points} points per randomization (the most allowed)"
                if limit is None or points >= limit else
                f"{points} points per randomization, and the error's rate puts the size "
                f"needed beyond the {limit} allowed")
        super().__init__(
            f"at tau={tau:g} the standard error of f is {error:.2e} > {target:.2e} requested, "
            f"with {size}; {where}")


class GibbsBarrierError(GibbsAccuracyError):
    """The fixed point presses against the barrier ``max|G| = 1``: at its sharpest peak
    ``δ = 1 − G² < BARRIER_DELTA``, below what a sampled reference resolves in double
    precision. Near a peak on ``k`` kinks the dual's gradient grows only like ``δ^{(k−3)/2}``
    (``log(1/δ)`` for ``k = 3``, bounded for ``k ≥ 4``) as ``δ → 0``, so the fixed point's
    ``δ`` falls fast with ``τ`` there (THEORY §5, "Where the reference stops").

    Attributes
    ----------
    tau, coldest, solved : as :class:`GibbsAccuracyError` (``coldest``: the coldest
        temperature at which the fixed point was found, None if none was).
    delta : float        ``1 − G²`` at the sharpest peak when the solver gave up
    kinks : int          the number of kinks through that peak
    """

    def __init__(self, tau, delta, kinks, coldest=None):
        self.tau, self.delta, self.kinks, self.coldest = tau, delta, kinks, coldest
        self.error = self.target = math.nan
        self.solved = []
        where = (f"the coldest temperature solved is tau={coldest:.3g}"
                 if coldest is not None else "no temperature tried was solved")
        RuntimeError.__init__(
            self, f"at tau={tau:g} the fixed point presses against the barrier max|G| = 1, "
            f"closer than the sampled reference resolves (1 - G^2 = {delta:.1e} at a peak on "
            f"{kinks} kinks; THEORY §5); {where}")


#: Convergence rates of the standard error in the number of points assumed before two sizes
#: measure it (``M^{-1/2}`` is plain Monte Carlo; scrambled Sobol' points do at least as well),
#: the range a measured rate is clipped to, the largest growth per step and the margin on the
#: predicted size.
RATE_PRIOR, RATE_RANGE, MAX_GROWTH, SIZE_MARGIN = 0.5, (0.5, 1.0), 16, 1.25


def _next_size(history, target):
    """Points per randomization to try next, and the size predicted to reach ``target``.

    ``history`` lists ``(M, error)`` of the sizes tried, smallest first. The error of
    randomized QMC falls like ``M^{-r}``, ``r`` between 1/2 (Monte Carlo) and about 1
    (smooth integrands); ``r`` is measured on the last two sizes (clipped to
    ``RATE_RANGE``; ``RATE_PRIOR`` before, or when the error did not fall). The prediction
    carries a margin ``SIZE_MARGIN`` and a step grows the size by a power of two, at most
    ``MAX_GROWTH``-fold (every component's count stays a power of two).
    Jumping straight to the ``M^{-1/2}`` prediction overshot by 4-8× at rtol 1e-4 (measured:
    the error fell like ``M^{-0.68}``). Returns ``(next, need)``.
    """
    M, err = history[-1]
    r = RATE_PRIOR
    if len(history) >= 2 and history[-2][1] > err:
        M0, e0 = history[-2]
        r = min(max(math.log(e0 / err) / math.log(M / M0), RATE_RANGE[0]), RATE_RANGE[1])
    need = SIZE_MARGIN * (err / target) ** (1.0 / r) * M
    grow = min(MAX_GROWTH, max(2.0, need / M))
    return M * 2 ** math.ceil(math.log2(grow) - 1e-9), need



# ---------------------------------------------------------------------------------------------
# the solver
# ---------------------------------------------------------------------------------------------

@dataclass
class _SampleRule:
    """The fixed sample, in the shape of :class:`solvers.spherequad.Rule` that
    :meth:`GibbsReference._evaluate` reads (a sample carries no deterministic error)."""

    V: np.ndarray
    W: np.ndarray
    error: np.ndarray
    Phi: np.ndarray


@dataclass
class QMCGibbsSolution(GibbsSolution):
    """A :class:`solvers.gibbs.GibbsSolution` by randomized QMC.

    Extra attributes
    ----------------
    f_stderr : ndarray (n,)
        Standard error of ``f_train`` over the randomizations; ``quad_error`` is its maximum.
    randomizations : int
    points : int
        Points per randomization (``n_nodes`` counts all of them).
    n_peaks : int
        Peaks of ``|G|`` the proposal is centred on.
    """

    f_stderr: np.ndarray = None
    randomizations: int = 0
    points: int = 0
    n_peaks: int = 0
    _proposal: Proposal = field(default=None, repr=False)
    _seeds: list = field(default=None, repr=False)
    _Rs: list = field(default=None, repr=False)

    def sample_particles(self, N: int, seed: int = 0) -> np.ndarray:
        """``N`` particles drawn from the stationary measure, rows ``(a, w_1..w_d, b)``.

        Directions by sampling-importance-resampling from the first randomization's points
        (``∝ W (1 − G²)^{−(d+1)/2}``), then (THEORY §5) ``r² ~ Gamma((d+1)/2,
        2τ/(λ(1 − G²)))`` and ``a | r, v ~ N(−r G, τ/λ)``.

        Returns
        -------
        ndarray of shape (N, d+2)
        """
        rng = np.random.default_rng(seed)
        ref = self._ref
        V, W = self._proposal.sample(self._seeds[0])
        G = ref._G(V, self._Rs[0])
        om = (1.0 - G) * (1.0 + G)
        pr = W * ref._h(om)
        idx = rng.choice(len(pr), size=int(N), p=pr / pr.sum())
        v, g, o = V[idx], G[idx], om[idx]
        r = np.sqrt(rng.gamma(ref.p, 2 * self.tau / (self.lam * o)))
        a = -r * g + math.sqrt(self.tau / self.lam) * rng.standard_normal(int(N))
        return np.column_stack([a, r[:, None] * v])

    def as_dict(self) -> dict:
        out = super().as_dict()
        out.update({"method": "qmc", "f_stderr": [float(v) for v in self.f_stderr],
                    "randomizations": int(self.randomizations), "points": int(self.points),
                    "n_peaks": int(self.n_peaks)})
        return out


class QMCGibbsReference(GibbsReference):
    """Gibbs fixed point of one data set and weight decay, any ``d``, by randomized QMC.

    Parameters
    ----------
    X : array-like of shape (n, d), any d ≥ 1
    y : array-like of shape (n,)
    lam : float
        Weight decay ``λ > 0``.
    rtol : float
        Requested standard error of ``f`` on the data, relative to ``max_j |f_j|``
        (default 1e-4).
    randomizations : int
        Independent scrambles ``K`` (default 8).
    points : int
        Points per randomization to start with (a power of two, default 2**12).
    max_points : int
        Most points per randomization (default 2**20).
    seed : int
        Seed of the scrambles (results are reproducible given it).
    max_patterns : int
        The peak search enumerates the activation cells; more than this many is refused.
    **kw
        ``tol``, ``max_newton``, ``max_continuation`` of :class:`GibbsReference`.

    Raises
    ------
    GibbsInputError
        ``lam <= 0``, non-finite data, mismatched shapes, too many activation cells.
    """

    def __init__(self, X, y, lam: float, *, rtol: float = 1e-4, randomizations: int = 8,
                 points: int = 2 ** 12, max_points: int = 2 ** 20, seed: int = 0,
                 max_patterns: int = 20_000, max_adapt: int = 6, **kw):
        self.max_patterns = int(max_patterns)
        if not (rtol > 0 and math.isfinite(rtol)):
            raise GibbsInputError("<gibbs>", "rtol", f"must be a finite number > 0, got {rtol!r}")
        if int(randomizations) < 2:
            raise GibbsInputError("<gibbs>", "randomizations",
                                  f"at least 2 are needed for an error bar, got {randomizations}")
        super().__init__(X, y, lam, **kw)
        self.target_rtol = float(rtol)
        self.K = int(randomizations)
        self.points = 2 ** max(4, round(math.log2(points)))
        self.max_points = int(max_points)
        self.seed = int(seed)
        self.max_adapt = int(max_adapt)
        self._sample = None
        self._sticky = []

    # -- the pieces GibbsReference asks for ------------------------------------------------------
    def _check_dimension(self, d):
        if d < 1:
            raise GibbsInputError("<gibbs>", "X", f"need d >= 1, got d = {d}")

    def _init_integration(self):
        try:
            self.patterns, _ = activation_patterns(self.X, max_patterns=self.max_patterns)
        except TooManyPatterns:
            raise GibbsInputError("<gibbs>", "X", f"more than {self.max_patterns} activation "
                                  f"cells: the peak search of the qmc reference would be too "
                                  f"slow") from None

    def exact_max_abs_G(self, R) -> float:
        """Exact ``max_v |G_R(v)|`` over ``S^d`` (a cone projection per activation cell)."""
        vals, _, _ = cell_maxima(R, self.X, self.lam, self.patterns)
        return float(vals.max())

    def max_abs_G(self, R) -> float:
        """The barrier of the sample-average dual: ``max|G_R|`` over the sample's points (the
        exact maximum when no sample is set). A sample's optimum beyond the exact barrier is
        caught afterwards, see :meth:`_adapt`."""
        if self._sample is None:
            return self.exact_max_abs_G(R)
        return float(np.max(np.abs(self._sample.Phi @ R))) / self.lam

    def _one_minus_G2(self, R):
        def f(V):
            G = self._G(V, R)
            return (1.0 - G) * (1.0 + G)
        return f

    def _rule(self, R, rtol=None):
        """The fixed sample; its ``error`` is the round-off of the sums at ``R`` (``G``
        carries ``eps Σ|R_j|φ_j/λ``, amplified by ``(2p+2)·2|G|/(1 − G²)``), which bounds how
        far Newton can converge (as for the quadrature)."""
        S = self._sample
        G = S.Phi @ R / self.lam
        om = (1.0 - G) * (1.0 + G)
        h = self._h(om)
        noise = _EPS * (4.0 + (4 * self.p + 4) * np.abs(G) * (S.Phi @ np.abs(R) / self.lam) / om)
        err = np.concatenate([[float(S.W @ (h * noise))],
                              (S.W * np.abs(G) * h / om * noise) @ S.Phi])
        return _SampleRule(S.V, S.W, err, S.Phi)

    # -- peaks and samples ---------------------------------------------------------------------
    def peaks(self, R) -> list:
        """Maximisers of ``±G_R`` on the activation cells with ``1 − G² ≤ PEAK_DELTA`` and
        within ``PEAK_RANGE`` of the sharpest, merged where they coincide (sharpest first)."""
        vals, args, _C = cell_maxima(R, self.X, self.lam, self.patterns)
        g = vals.ravel()
        dl = (1 - g) * (1 + g)
        if g.max() <= 0 or dl.min() > PEAK_DELTA:
            return []
        keep = np.nonzero((g > 0) & (dl <= min(PEAK_DELTA, PEAK_RANGE * dl.min())))[0]
        keep = keep[np.argsort(dl[keep])]
        out = []
        V = args.reshape(-1, self.d + 1)
        nx = np.linalg.norm(self.Xt, axis=1)
        for k in keep:
            v = V[k]
            if any(float(v @ q.v) > 1 - 1e-12 for q in out):
                continue                                 # the same point from another cell
            on = np.abs(self.Xt @ v) <= 1e-9 * nx
            out.append(Peak(v=v, g=float(g[k]), delta=float(dl[k]),
                            normal=(self.Xt[on] / nx[on, None]).T))
        for q in self._sticky:
            if not any(float(q.v @ a.v) > 1 - 1e-12 and a.delta <= q.delta for a in out):
                out.append(q)
        return out

    def _remember_escape(self, R):
        """A sample's optimum went beyond the barrier near ``R``: keep the sharpest peak there
        in every later proposal at this temperature, with its (small) ``δ``."""
        pk = self.peaks(R)
        if pk:
            self._sticky.append(min(pk, key=lambda q: q.delta))

    def _check_barrier(self, peaks, tau, early=True, overshoot=False):
        """Raise :class:`GibbsBarrierError` when the sharpest peak has ``δ < BARRIER_DELTA``:
        on the way (``early``) only for a peak on three kinks or more, whose barrier is
        logarithmic or absent; when the solver is about to give up, for any peak, and always
        when the samples' fixed points kept landing beyond the barrier (``overshoot``: Newton
        converged on them, the exact ``max|G|`` there is ``≥ 1``)."""
        if peaks:
            pk = min(peaks, key=lambda q: q.delta)
            if overshoot or (pk.delta < BARRIER_DELTA
                             and (pk.normal.shape[1] >= 3 or not early)):
                raise GibbsBarrierError(tau, pk.delta, pk.normal.shape[1])

    def _peaks_match(self, old, new) -> bool:
        """Every sharp peak (``δ`` within a factor 16 of the sharpest) of either list sits
        within a quarter of its width of a peak of the other with ``δ`` within a factor 2."""
        def covered(A, B):
            if not A:
                return not B
            lim = 16 * min(a.delta for a in A)
            for a in A:
                if a.delta > lim:
                    continue
                if not any(math.acos(max(-1.0, min(1.0, float(a.v @ b.v))))
                           <= 0.25 * math.sqrt(a.delta) and 0.5 <= a.delta / b.delta <= 2.0
                           for b in B):
                    return False
            return True
        return covered(new, old) and covered(old, new)

    def _set_sample(self, prop, seed):
        V, W = prop.sample(seed)
        self._sample = _SampleRule(V, W, np.zeros(self.n + 1), np.maximum(V @ self.Xt.T, 0.0))

    def _seeds(self, tau):
        return [[self.seed, round(1e6 * -math.log10(tau)) & 0x7FFFFFFF, k]
                for k in range(self.K + self.max_adapt)]

    # -- one temperature -----------------------------------------------------------------------
    def _towards(self, R, R1):
        """Half the furthest feasible point ``R + 2^{-i}(R1 − R)`` from feasible ``R``
        (``max|G_R|`` is convex in ``R``, so the segment up to it is feasible)."""
        s = 1.0
        while s > 1e-3 and self.exact_max_abs_G(R + s * (R1 - R)) >= 1.0 - 1e-12:
            s *= 0.5
        return R + 0.5 * s * (R1 - R)

    def _adapt(self, R, tau_prev, tau, seeds, M, depth=0):
        """Newton on pilot samples, the proposal rebuilt at each result, until Newton converges
        and the peaks stay put; else through an intermediate temperature (``√(τ_prev τ)``, or
        ``10τ`` from the start). Returns ``(R, proposal, peaks, iterations)``."""
        peaks = self.peaks(R)
        iters = 0
        overshoot = False                # the last pass converged beyond the exact barrier
        done = None                      # the last pass whose Newton converged
        for a in range(self.max_adapt):
            prop = build_proposal(peaks, self.d, M, self._one_minus_G2(R))
            self._set_sample(prop, seeds[a])
            R1, ev, it, ok = self._newton(R, tau, self.max_newton)
            iters += it
            _log.debug("tau=%g adapt %d (depth %d): %d peaks, min delta %.2e, newton %s in %d, "
                       "exact max|G| %.8f", tau, a, depth, len(peaks),
                       min((q.delta for q in peaks), default=float("nan")), ok, it,
                       self.exact_max_abs_G(R1))
            overshoot = ok and self.exact_max_abs_G(R1) >= 1.0
            if not ok or overshoot:
                # the sample's optimum lies beyond the true barrier (the proposal missed a
                # sharper peak): restart at the furthest feasible point of R + 2^-i (R1 − R)
                # (max|G_R| is convex in R), with the proposal built there
                R = self._towards(R, R1)
                self._remember_escape(R)
                peaks = self.peaks(R)
                if peaks:
                    pk = min(peaks, key=lambda q: q.delta)
                    _log.debug("tau=%g: back to a feasible point; sharpest peak delta %.2e on "
                               "%d kinks", tau, pk.delta, pk.normal.shape[1])
                self._check_barrier(peaks, tau)
                continue
            R = R1
            new = self.peaks(R)
            done = (R, prop, peaks)
            if self._peaks_match(peaks, new):
                return R, prop, peaks, iters
            peaks = new
        if done is not None:
            # converged, though the peaks still move from sample to sample (broad peaks at a
            # hot temperature): every proposal is unbiased, this one is adapted enough
            return done + (iters,)
        if depth >= self.max_continuation:
            self._check_barrier(self.peaks(R), tau, early=False, overshoot=overshoot)
            raise GibbsConvergenceError(
                f"residual {np.max(np.abs(ev['grad'])):.3e} at tau={tau:g} after {iters} Newton "
                f"steps on {self.max_adapt} adapted samples, {depth} levels of intermediate "
                f"temperatures")
        mid = math.sqrt(tau_prev * tau) if tau_prev is not None else 10.0 * tau
        R, _, _, it1 = self._adapt(R, tau_prev, mid, seeds, M, depth + 1)
        R, prop, peaks, it2 = self._adapt(R, mid, tau, seeds, M, depth + 1)
        return R, prop, peaks, iters + it1 + it2

    def _solve_one(self, R, tau_prev, tau):
        """Adapt the proposal, then ``K`` randomizations, growing the sample to the accuracy.

        Returns (solution, None) or (None, (error, target, points)) when out of reach."""
        seeds = self._seeds(tau)
        M = self.points
        self._sticky = []
        R, prop, peaks, iters = self._adapt(R, tau_prev, tau, seeds[self.K:], M)
        retries = 0
        history = []                     # (points per randomization, standard error)
        while True:
            prop = prop.resized(M)
            fs, Rs, logI = [], [], []
            for k in range(self.K):
                self._set_sample(prop, seeds[k])
                Rk, ev, it, ok = self._newton(R, tau, self.max_newton)
                iters += it
                if not ok or self.exact_max_abs_G(Rk) >= 1.0:
                    # this scramble's optimum is beyond the true barrier: adapt again from
                    # the furthest feasible point towards it
                    if retries >= 6:
                        beyond = self.exact_max_abs_G(Rk) >= 1.0
                        near = self._towards(R, Rk) if beyond else Rk
                        self._check_barrier(self.peaks(near), tau, early=False,
                                            overshoot=ok and beyond)
                        raise GibbsConvergenceError(
                            f"residual {np.max(np.abs(ev['grad'])):.3e}, max|G| = "
                            f"{self.exact_max_abs_G(Rk):.6f} at tau={tau:g} on randomization "
                            f"{k} after {it} Newton steps")
                    retries += 1
                    R = self._towards(R, Rk)
                    self._remember_escape(R)
                    R, prop, peaks, it = self._adapt(R, tau, tau, seeds[self.K:], prop.M)
                    iters += it
                    break
                fs.append(ev["f"])
                Rs.append(Rk)
                logI.append(ev["logI"])
            if len(fs) < self.K:
                continue
            F = np.asarray(fs)
            f = F.mean(axis=0)
            se = F.std(axis=0, ddof=1) / math.sqrt(self.K)
            err = float(se.max())
            target = self.target_rtol * float(np.max(np.abs(f)))
            _log.debug("tau=%g: %d points x %d randomizations, %d components: stderr/max|f| "
                       "= %.2e (asked %.2e)", tau, prop.M, self.K, len(prop.counts),
                       err / float(np.max(np.abs(f))), self.target_rtol)
            if err <= target:
                break
            history.append((prop.M, err))
            M, need = _next_size(history, target)
            if prop.M >= self.max_points or need > 4 * self.max_points:
                return None, (err, target, prop.M, self.max_points)
            M = min(M, self.max_points)
        Rm = np.mean(Rs, axis=0)
        sol = QMCGibbsSolution(
            tau=float(tau), lam=self.lam, X=self.X, y=self.y, R=Rm, f_train=f,
            residual=float(np.max(np.abs(f - self.y - self.n * Rm))),
            max_abs_G=self.exact_max_abs_G(Rm), quad_error=err, n_nodes=int(prop.M * self.K),
            iterations=int(iters), log_I=float(np.mean(logI)), _ref=self, _rule=None,
            f_stderr=se, randomizations=self.K, points=prop.M, n_peaks=len(peaks),
            _proposal=prop, _seeds=seeds[:self.K], _Rs=Rs)
        return sol, None

    # -- public --------------------------------------------------------------------------------
    def solve(self, taus, R0=None) -> list:
        """Fixed points at every temperature of ``taus``, hot to cold (see
        :meth:`GibbsReference.solve`).

        Raises
        ------
        GibbsInputError
            A temperature that is not a finite number > 0.
        GibbsConvergenceError
            Newton did not converge on a sample.
        GibbsAccuracyError
            The requested accuracy is out of reach at some temperature; two geometric
            bisections between the last temperature reached (or, with none, the first of
            ``τ·10^{i/2}`` that is) and it locate the coldest temperature that can be reached
            (``coldest``); the hotter temperatures of ``taus`` solved before are in
            ``solved``.
        GibbsBarrierError
            (a GibbsAccuracyError) The fixed point presses against ``max|G| = 1`` at a peak
            on three kinks or more, below what the sample resolves; ``coldest`` as above.
        """
        return super().solve(taus, R0)

    def _start_max_abs_G(self, R) -> float:
        return self.exact_max_abs_G(R)

    def _solve_at(self, R, prev, tau):
        try:
            return self._solve_one(R, prev, tau)
        except GibbsBarrierError as exc:
            return None, exc

    def _attempt(self, R, prev, tau):
        """``R`` of the fixed point at ``tau`` (continued from ``prev``), or None if out of
        reach (accuracy, barrier or convergence)."""
        try:
            sol, bad = self._solve_one(R, prev, tau)
        except (GibbsConvergenceError, GibbsAccuracyError):
            return None
        return None if bad is not None else sol.R

    def _out_of_reach(self, R, prev, tau, fail):
        """The error for ``tau``, with the coldest temperature that can be solved: two
        geometric bisections between the last temperature solved (``prev``) and ``tau``.
        With none solved yet, hotter temperatures ``tau·10^{i/2}`` (``i = 1..4``) are tried
        first, from ``R``. ``fail``: a :class:`GibbsBarrierError` (the search then runs at
        ``BARRIER_SEARCH_RTOL`` or the requested accuracy, the looser), or the ``(error,
        target, points, limit)`` of an accuracy failure."""
        rtol = self.target_rtol
        if isinstance(fail, GibbsBarrierError):
            # the barrier does not depend on the accuracy: search at a cheap one
            self.target_rtol = max(rtol, BARRIER_SEARCH_RTOL)
        try:
            lo, _ = self._coldest(R, prev, tau)
        finally:
            self.target_rtol = rtol
        if isinstance(fail, GibbsBarrierError):
            return GibbsBarrierError(tau, fail.delta, fail.kinks, lo)
        return GibbsAccuracyError(tau, fail[0], fail[1], lo, *fail[2:])

    def _coldest(self, R, prev, tau):
        """``(coldest temperature solved, its R)`` by the search of :meth:`_out_of_reach`."""
        lo, hi, Rlo = prev, tau, R
        if lo is None:
            for i in range(1, 5):
                t = tau * 10 ** (0.5 * i)
                Rt = self._attempt(R, None, t)
                if Rt is not None:
                    lo, Rlo = t, Rt
                    break
                hi = t
        for _ in range(2):
            if lo is None:
                break
            mid = math.sqrt(lo * hi)
            Rm = self._attempt(Rlo, lo, mid)
            if Rm is not None:
                lo, Rlo = mid, Rm
            else:
                hi = mid
        return lo, Rlo

    def predict(self, sol: QMCGibbsSolution, x, rtol=None):
        """``f_R(x)`` at inputs ``x`` (m, d): the mean over the solution's randomizations of
        the sample estimate (each with its own fixed point)."""
        if x.shape[0] == 0:
            return np.zeros(0)
        xt = np.hstack([x, np.ones((x.shape[0], 1))])
        c = 2 * self.p * sol.tau / self.lam
        acc = np.zeros(x.shape[0])
        for seed, Rk in zip(sol._seeds, sol._Rs):
            V, W = sol._proposal.sample(seed)
            G = self._G(V, Rk)
            om = (1.0 - G) * (1.0 + G)
            h = self._h(om)
            I = float(W @ h)
            acc += -c * (np.maximum(V @ xt.T, 0.0).T @ (W * G * h / om)) / I
        return acc / len(sol._seeds)


def gibbs_qmc(X, y, lam: float, tau, **kw):
    """Stationary measure(s) of the mean-field dynamics by randomized QMC (any ``d``).

    Parameters
    ----------
    X : array-like of shape (n, d); y : array-like of shape (n,)
    lam : float
        Weight decay ``λ > 0``.
    tau : float or sequence of float
        Temperature(s) ``τ > 0`` (a sequence: continuation from hot to cold).
    **kw
        Options of :class:`QMCGibbsReference` (``rtol``, ``randomizations``, ``points``, ...).

    Returns
    -------
    QMCGibbsSolution, or a list of them when ``tau`` is a sequence.

    Raises
    ------
    GibbsInputError, GibbsConvergenceError, GibbsAccuracyError
    """
    ref = QMCGibbsReference(X, y, lam, **kw)
    sols = ref.solve(np.atleast_1d(tau))
    return sols if np.ndim(tau) else sols[0]
