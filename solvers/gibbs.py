"""Exact finite-temperature stationary measure of the mean-field dynamics (THEORY §5).

For fixed scaled residuals ``R`` (n,), write ``u = (w, b) = r v`` with ``r ≥ 0``, ``v ∈ S^d``, and
``G(v) = (1/λ) Σ_j R_j (v·x̃_j)_+``. Then ``Ψ(θ) = λ a r G(v) + (λ/2)(a² + r²)`` and the Gibbs
density ``exp(−Ψ/τ) da r^d dr dv`` integrates in closed form over ``a`` (Gaussian, mean ``−rG``,
variance ``τ/λ``) and ``r``:

- direction density (a probability density for the surface measure of ``S^d``)
  ``π_R(v) = (1 − G(v)²)^{−p} / I(R)``, ``p = (d+1)/2``, ``I(R) = ∫_{S^d} (1 − G²)^{−p} dv``;
- ``E[a | r, v] = −r G(v)``, ``E[r² | v] = (d+1) τ / (λ (1 − G(v)²))``;
- predictor ``f_R(x) = E[a r (v·x̃)_+] = −(d+1)(τ/λ) ∫ π_R(v) G(v) (v·x̃)_+ / (1 − G(v)²) dv``.

The stationary measure is the fixed point ``R = (f_R(X) − y)/n``. It is the unique maximiser of
the concave dual of the free energy (derived from ``½|f−y|²/n = max_R R·(f−y) − (n/2)|R|²`` and
``min_ρ ∫Ψ_R dρ + τ∫ρ log ρ = −τ log Z(R)``)::

    D(R) = −τ log I(R) − R·y − (n/2)|R|²,     ∇D = f_R(X) − y − nR,

strongly concave with modulus ``n`` on the convex set ``{max_v |G_R(v)| < 1}``, where ``I``
is finite (it is ``+∞`` outside, a barrier). We maximise ``D`` by damped Newton with exact
Hessian ``∇²D = −τ ∇² log I − n·Id``, warm-started along the temperature ladder (hot to cold);
a target that the warm start cannot reach in ``max_newton`` steps is approached through
intermediate temperatures. Integrals over the circle (``d = 1``) or the 2-sphere (``d = 2``) use
:mod:`solvers.spherequad` (cells of the data arrangement, peaks of ``|G|`` at element corners,
adaptive Gauss–Legendre with a round-off floor), so the reference is exact to ``≈ rtol`` plus the
round-off ``eps/(1 − max|G|)`` of evaluating ``1 − G²``.

Source: THEORY §5 *(derived)*; the free energy of THEORY §1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from solvers import spherequad as sq
from solvers.errors import InputError
from solvers.geometry import lifted
from solvers.inputs import check_xy
from solvers.reference_methods import QUADRATURE_MAX_D

_EPS = np.finfo(float).eps


#: Inputs the Gibbs reference cannot take (``d > 2``, ``tau <= 0``, ``lam <= 0``, NaN data):
#: the package's :class:`solvers.errors.InputError` (bad arrays: its subclass ``DataError``).
GibbsInputError = InputError


class GibbsConvergenceError(RuntimeError):
    """The fixed-point (dual Newton) iteration did not converge; the message names ``tau``, the
    iteration count and the remaining residual."""


def check_taus(taus) -> list:
    """Temperatures as a list of float; :class:`GibbsInputError` unless each is finite and > 0."""
    taus = [float(t) for t in np.atleast_1d(taus)]
    for t in taus:
        if not (t > 0 and math.isfinite(t)):
            raise GibbsInputError("<gibbs>", "tau", f"must be a finite number > 0, got {t!r} "
                                  f"(tau = 0 is the convex reference)")
    return taus


@dataclass
class GibbsSolution:
    """The stationary measure at one temperature.

    Attributes
    ----------
    tau, lam : float
        Temperature and weight decay.
    X : ndarray of shape (n, d); y : ndarray of shape (n,)
    R : ndarray of shape (n,)
        Scaled residuals of the fixed point, ``R = (f_R(X) − y)/n``.
    f_train : ndarray of shape (n,)
        ``f_R(x_j)`` by quadrature.
    residual : float
        Fixed-point residual in units of ``f``: ``max_j |f_R(x_j) − y_j − n R_j|``.
    max_abs_G : float
        Exact ``max_v |G_R(v)|`` (< 1).
    quad_error : float
        Estimated absolute quadrature error of ``f_train`` (adaptive estimate plus round-off).
    n_nodes : int
        Nodes of the final adapted rule.
    iterations : int
        Newton steps at this temperature (including intermediate temperatures).
    """

    tau: float
    lam: float
    X: np.ndarray
    y: np.ndarray
    R: np.ndarray
    f_train: np.ndarray
    residual: float
    max_abs_G: float
    quad_error: float
    n_nodes: int
    iterations: int
    log_I: float = 0.0
    _ref: GibbsReference = field(default=None, repr=False)
    _rule: object = field(default=None, repr=False)

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    def G(self, V):
        """Certificate ``G_R(v)`` at unit directions ``V`` (m, d+1)."""
        return self._ref._G(np.asarray(V, dtype=float), self.R)

    def density(self, V):
        """Direction density ``π_R(v)`` at unit directions ``V`` (m, d+1), per unit length
        (``d = 1``) or area (``d = 2``) of ``S^d``; it integrates to 1."""
        G = self.G(V)
        return np.exp(-self._ref.p * np.log1p(-G * G) - self.log_I)

    def second_moment(self, V):
        """``E[r² | v] = (d+1) τ / (λ (1 − G(v)²))`` at unit directions ``V`` (m, d+1)."""
        G = self.G(V)
        return (self.d + 1) * self.tau / (self.lam * (1 - G) * (1 + G))

    def directions(self, m: int | None = None):
        """Direction density and radial moment on a grid of ``S^d``.

        Returns
        -------
        tuple of ndarray
            d = 1: ``(theta (m,), V (m, 2), density (m,), second_moment (m,))`` with
            ``V = (cos θ, sin θ)`` (default ``m = 720``); d = 2:
            ``(theta (m,), phi (2m,), V (m, 2m, 3), density (m, 2m), second_moment (m, 2m))``
            with polar angle ``θ`` from the ``b`` axis and azimuth ``φ`` (default ``m = 90``).
        """
        if self.d == 1:
            m = m or 720
            th = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
            V = np.stack([np.cos(th), np.sin(th)], axis=1)
            return th, V, self.density(V), self.second_moment(V)
        m = m or 90
        th = (np.arange(m) + 0.5) * np.pi / m
        ph = (np.arange(2 * m) + 0.5) * np.pi / m
        T, P = np.meshgrid(th, ph, indexing="ij")
        V = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], axis=-1)
        flat = V.reshape(-1, 3)
        return (th, ph, V, self.density(flat).reshape(T.shape),
                self.second_moment(flat).reshape(T.shape))

    def predict(self, x, rtol: float | None = None):
        """``f_R(x)`` at inputs ``x`` (m, d) by quadrature with the kinks of ``x`` resolved.

        ``d = 1`` adds all kinks at once; ``d = 2`` adds one plane per point (about one adaptive
        rule per point, tens of milliseconds each).
        """
        return self._ref.predict(self, np.asarray(x, dtype=float).reshape(-1, self.d), rtol)

    def grid(self, m: int | None = None, pad: float = 0.25):
        """Predictor on a regular grid over the data's bounding box enlarged by ``pad`` of its
        extent: ``d = 1``: ``(x (m,), f (m,))`` (default ``m = 201``); ``d = 2``:
        ``(x1 (m,), x2 (m,), f (m, m))`` with ``f[i, k] = f(x1[i], x2[k])`` (default ``m = 21``;
        each point costs one small adaptive rule)."""
        m = m or (201 if self.d == 1 else 21)
        lo, hi = self.X.min(axis=0), self.X.max(axis=0)
        ext = np.maximum(hi - lo, 1.0)
        axes = [np.linspace(lo[k] - pad * ext[k], hi[k] + pad * ext[k], m) for k in range(self.d)]
        if self.d == 1:
            return axes[0], self.predict(axes[0][:, None])
        P = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
        return axes[0], axes[1], self.predict(P).reshape(m, m)

    def as_dict(self) -> dict:
        """The ``reference gibbs --json`` document."""
        return {"tau": float(self.tau), "method": "quadrature", "R": [float(r) for r in self.R],
                "f_train": [float(v) for v in self.f_train], "max_abs_G": float(self.max_abs_G),
                "residual": float(self.residual), "quad_error": float(self.quad_error),
                "iterations": int(self.iterations), "n_nodes": int(self.n_nodes)}


class GibbsReference:
    """Solver for the Gibbs fixed point of one data set and weight decay.

    Parameters
    ----------
    X : array-like of shape (n, d), d in {1, 2}
    y : array-like of shape (n,)
    lam : float
        Weight decay ``λ > 0``.
    rtol : float
        Relative quadrature tolerance (default 1e-12).
    tol : float
        Convergence: ``max_j |f_R(x_j) − y_j − n R_j| ≤ tol · max(1, max|y|)`` (default 1e-10),
        or 4x the estimated quadrature error when round-off near ``|G| = 1`` exceeds that.
    max_newton : int
        Newton steps per temperature before intermediate temperatures are inserted.
    rtol_coarse : float
        Quadrature tolerance of the early Newton steps (default 1e-8).
    max_continuation : int
        Nesting depth of intermediate temperatures before giving up.

    Raises
    ------
    GibbsInputError
        ``d`` not 1 or 2, ``lam <= 0``, non-finite data or mismatched shapes.
    """

    def __init__(self, X, y, lam: float, *, rtol: float = 1e-12, tol: float = 1e-10,
                 max_newton: int = 40, rtol_coarse: float = 1e-8, max_continuation: int = 12):
        X, y = check_xy(X, y, "<gibbs>")
        n, d = X.shape
        self._check_dimension(d)
        if not (lam > 0 and math.isfinite(lam)):
            raise GibbsInputError("<gibbs>", "lam", f"must be a finite number > 0, got {lam!r}")
        self.X, self.y, self.lam = X, y, float(lam)
        self.n, self.d = n, d
        self.p = 0.5 * (d + 1)
        self.Xt = lifted(X)
        self.rtol, self.tol, self.max_newton = float(rtol), float(tol), int(max_newton)
        self.rtol_coarse = float(rtol_coarse)
        self.max_continuation = int(max_continuation)
        self._init_integration()

    def _check_dimension(self, d):
        if not 1 <= d <= QUADRATURE_MAX_D:
            raise GibbsInputError("<gibbs>", "X", f"the Gibbs quadrature integrates over the "
                                  f"cells of S^d and is implemented for d = 1 and d = 2 only, "
                                  f"got d = {d} (use the qmc back end, solvers.gibbsqmc)")

    def _init_integration(self):
        """The arrangement cells of the lifted data (the quadrature's domain pieces)."""
        self.cells = sq.arrangement(self.Xt, self.d)
        self.pat = self.cells.patterns(self.Xt).astype(float)     # (C, n)

    # -- pieces --------------------------------------------------------------------------------
    def _G(self, V, R):
        return np.maximum(V @ self.Xt.T, 0.0) @ R / self.lam

    def _cell_coeffs(self, R, cells=None, pat=None):
        """``c`` with ``G = c·v`` on every cell: ``Σ_j 1[j on] R_j x̃_j / λ`` (C, d+1), for the
        data arrangement or for ``cells`` with data patterns ``pat`` (C, n)."""
        pat = self.pat if pat is None else pat
        return (pat * R[None, :]) @ self.Xt / self.lam                 # (C, d+1)

    def max_abs_G(self, R) -> float:
        """Exact ``max_v |G_R(v)|`` over ``S^d``."""
        return sq.max_abs_linear(self.cells, self._cell_coeffs(R))[0]

    def _h(self, om):
        """``(1 − G²)^{−p}`` from ``om = 1 − G²``."""
        if self.d == 1:
            return 1.0 / om
        if self.d == 2:
            return 1.0 / (om * np.sqrt(om))
        return om ** (-self.p)

    def _rule(self, R, rtol=None):
        """A rule on the data arrangement adapted to ``G_R``: it resolves ``(1 − G²)^{−p}``,
        ``g (v·x̃_j)_+`` for every training input and ``g v``, with ``g = G (1 − G²)^{−p−1}``."""
        el = sq.initial_elements(self.cells, self._cell_coeffs(R))
        p, lam = self.p, self.lam
        Rabs = np.abs(R)

        def control(V):
            Phi = np.maximum(V @ self.Xt.T, 0.0)
            G = Phi @ R / lam
            om = (1.0 - G) * (1.0 + G)
            h = self._h(om)
            g = G * h / om
            F = np.hstack([h[:, None], g[:, None] * Phi, g[:, None] * V])
            # round-off: G carries eps·Σ|R_j|φ_j/λ, amplified by (2p+2)·2|G|/(1 − G²)
            return F, _EPS * (4.0 + (4 * p + 4) * np.abs(G) * (Phi @ Rabs / lam) / om)

        return sq.adaptive_rule(el, self.d, control, rtol=rtol or self.rtol)

    def _evaluate(self, R, tau, rtol=None, hessian=True):
        """Dual value, gradient, Hessian (negated) and f at ``R``; None if infeasible."""
        if self.max_abs_G(R) >= 1.0:
            return None
        rule = self._rule(R, rtol)
        V, W = rule.V, rule.W
        Phi = getattr(rule, "Phi", None)                 # a fixed sample carries its own
        if Phi is None:
            Phi = np.maximum(V @ self.Xt.T, 0.0)
        G = Phi @ R / self.lam
        om = (1.0 - G) * (1.0 + G)
        h = self._h(om)
        I = float(W @ h)
        if not (np.isfinite(I) and I > 0):
            return None
        c = 2 * self.p * tau / self.lam
        F = Phi.T @ (W * G * h / om) / I
        f = -c * F
        D = -tau * math.log(I) - R @ self.y - 0.5 * self.n * R @ R
        grad = f - self.y - self.n * R
        out = {"D": D, "grad": grad, "f": f, "logI": math.log(I), "rule": rule}
        if hessian:
            w2 = W * (1.0 + (2 * self.p + 1) * G * G) * h / (om * om) / I
            S2 = (Phi * w2[:, None]).T @ Phi
            Fs = (2 * self.p / self.lam) * F
            negH = tau * ((2 * self.p / self.lam ** 2) * S2 - np.outer(Fs, Fs)) \
                + self.n * np.eye(self.n)
            out["negH"] = negH
        # error of f from the rule's estimate of the control integrals (relative to I)
        err = rule.error
        out["quad_error"] = float(c * (np.max(err[1:1 + self.n]) + np.max(np.abs(F)) * err[0]) / I)
        return out

    def _newton(self, R, tau, max_iter):
        """Damped Newton on the dual at ``tau`` from feasible ``R``; returns (R, ev, iters, ok).

        While the gradient is large the rule is built with ``rtol_coarse`` (inexact Newton);
        convergence is judged on the full-accuracy rule: ``max|∇D| ≤ tol·max(1, max|y|)``, or
        within 4x the quadrature error where round-off (``eps/(1 − max|G|)``) dominates.
        """
        scale = max(1.0, float(np.max(np.abs(self.y))))
        coarse = max(self.rtol, self.rtol_coarse)
        rt = coarse
        ev = self._evaluate(R, tau, rt)
        for it in range(1, max_iter + 1):
            g = ev["grad"]
            gmax = float(np.max(np.abs(g)))
            if rt > self.rtol and gmax <= 1e3 * coarse * scale:
                rt = self.rtol
                ev = self._evaluate(R, tau, rt)
                g = ev["grad"]
                gmax = float(np.max(np.abs(g)))
            if rt == self.rtol and gmax <= max(self.tol * scale, 4 * ev["quad_error"]):
                return R, ev, it - 1, True
            step = np.linalg.solve(ev["negH"], g)
            slope = float(g @ step)
            alpha = 1.0
            while True:
                Rn = R + alpha * step
                evn = self._evaluate(Rn, tau, rt)
                if evn is not None and evn["D"] >= ev["D"] + 1e-4 * alpha * slope:
                    break
                # near the optimum the change of D is below its resolution: accept a step
                # that reduces the gradient
                if evn is not None and alpha * slope < 1e-10 * max(1.0, abs(ev["D"])) and \
                        np.max(np.abs(evn["grad"])) < gmax:
                    break
                alpha *= 0.5
                if alpha < 1e-12:
                    return R, ev, it, False
            R, ev = Rn, evn
        if rt > self.rtol:
            ev = self._evaluate(R, tau, self.rtol)
        ok = np.max(np.abs(ev["grad"])) <= max(self.tol * scale, 4 * ev["quad_error"])
        return R, ev, max_iter, ok

    def _solution(self, R, ev, tau, iters):
        rule = ev["rule"]
        return GibbsSolution(
            tau=float(tau), lam=self.lam, X=self.X, y=self.y, R=R.copy(), f_train=ev["f"].copy(),
            residual=float(np.max(np.abs(ev["grad"]))), max_abs_G=self.max_abs_G(R),
            quad_error=ev["quad_error"], n_nodes=int(rule.V.shape[0]), iterations=int(iters),
            log_I=ev["logI"], _ref=self, _rule=rule)

    # -- public --------------------------------------------------------------------------------
    def solve(self, taus, R0=None) -> list:
        """Fixed points at every temperature of ``taus``, by continuation from hot to cold.

        Parameters
        ----------
        taus : sequence of float > 0
            Temperatures (any order; solved from the largest down, returned in the given order).
        R0 : ndarray (n,), optional
            Feasible starting residuals for the hottest temperature (default 0).

        Returns
        -------
        list of GibbsSolution

        Raises
        ------
        GibbsInputError
            A temperature that is not a finite number > 0.
        GibbsConvergenceError
            No convergence even through intermediate temperatures.
        """
        taus = check_taus(taus)
        order = sorted(range(len(taus)), key=lambda i: -taus[i])
        R = np.zeros(self.n) if R0 is None else np.asarray(R0, dtype=float).copy()
        if self._start_max_abs_G(R) >= 1:
            raise GibbsInputError("<gibbs>", "R0", "starting residuals are infeasible (max|G| >= 1)")
        out = [None] * len(taus)
        prev = None                                    # last solved temperature
        for i in order:
            try:
                sol, fail = self._solve_at(R, prev, taus[i])
            except GibbsConvergenceError as exc:
                raise GibbsConvergenceError(
                    f"Gibbs fixed point did not converge at tau={taus[i]:g} "
                    f"(lam={self.lam:g}): {exc}") from None
            if fail is not None:
                err = self._out_of_reach(R, prev, taus[i], fail)
                err.solved = [s for s in (out[j] for j in order) if s is not None]
                raise err from None
            out[i] = sol
            R, prev = sol.R, taus[i]
        return out

    # -- the steps of the continuation (the QMC back end replaces them) -------------------------
    def _start_max_abs_G(self, R) -> float:
        """``max|G_R|`` that decides whether the starting residuals are feasible."""
        return self.max_abs_G(R)

    def _solve_at(self, R, prev, tau):
        """``(solution at tau, None)`` continued from ``R`` solved at ``prev`` (None for the
        start), or ``(None, failure)`` when ``tau`` is out of reach (never, here: a failure
        to converge raises :class:`GibbsConvergenceError`)."""
        R, ev, iters = self._reach(R, prev, tau)
        return self._solution(R, ev, tau, iters), None

    def _out_of_reach(self, R, prev, tau, fail) -> Exception:
        """The error to raise for a ``failure`` of :meth:`_solve_at` at ``tau`` (its
        ``solved`` is then set to the hotter solutions)."""
        raise NotImplementedError(f"no failure of the quadrature back end: {fail!r}")

    def _reach(self, R, tau_prev, tau, depth=0):
        """Newton at ``tau`` from ``R`` (solved at ``tau_prev``, None for the start); on failure
        go through ``sqrt(tau_prev·tau)`` (or ``10·tau`` from the start) first."""
        R1, ev, iters, ok = self._newton(R, tau, self.max_newton)
        if ok:
            return R1, ev, iters
        if depth >= self.max_continuation:
            raise GibbsConvergenceError(
                f"residual {np.max(np.abs(ev['grad'])):.3e} at tau={tau:g} after {iters} "
                f"Newton steps, {depth} levels of intermediate temperatures")
        mid = math.sqrt(tau_prev * tau) if tau_prev is not None else 10.0 * tau
        Rm, _, it1 = self._reach(R, tau_prev, mid, depth + 1)
        Rf, ev, it2 = self._reach(Rm, mid, tau, depth + 1)
        return Rf, ev, iters + it1 + it2

    def predict(self, sol: GibbsSolution, x, rtol=None):
        """See :meth:`GibbsSolution.predict`.

        ``f(x) = −(d+1)(τ/λ) Σ_cells ∫_cell g(v) (v·x̃)_+ dv / I`` with ``g = G (1 − G²)^{−p−1}``.
        On a cell inside ``{v·x̃ ≥ 0}`` the integral is ``x̃·∫_cell g v dv``, a moment of the
        solution's rule; only the cells cut by ``{v·x̃ = 0}`` are integrated anew, on their
        positive parts.
        """
        if x.shape[0] == 0:
            return np.zeros(0)
        rule = sol._rule
        M = self._cell_moments(sol.R, rule)
        c = 2 * self.p * sol.tau / self.lam
        xt = lifted(x)
        out = np.empty(x.shape[0])
        for k, m in enumerate(xt):
            inside, parts, parent = sq.positive_parts(self.cells, m)
            tot = float(np.sum(M[inside] @ m))
            if parts.n_cells:
                tot += self._integrate_parts(sol.R, parts, self.pat[parent], m, rtol)
            out[k] = -c * tot * math.exp(-sol.log_I)
        return out

    def _cell_moments(self, R, rule):
        """``∫_cell G (1 − G²)^{−p−1} v dv`` for every cell of the data arrangement (C, d+1)."""
        Phi = np.maximum(rule.V @ self.Xt.T, 0.0)
        G = Phi @ R / self.lam
        om = (1.0 - G) * (1.0 + G)
        wg = rule.W * G * self._h(om) / om
        C = self.cells.n_cells
        return np.stack([np.bincount(rule.cell, wg * rule.V[:, k], minlength=C)
                         for k in range(self.d + 1)], axis=1)

    def _integrate_parts(self, R, parts, pat, m, rtol):
        """``∫ G (1 − G²)^{−p−1} (v·m) dv`` over the cells ``parts`` (inside ``v·m ≥ 0``)."""
        el = sq.initial_elements(parts, self._cell_coeffs(R, parts, pat))
        p, lam = self.p, self.lam
        Rabs = np.abs(R)

        def control(V):
            Phi = np.maximum(V @ self.Xt.T, 0.0)
            G = Phi @ R / lam
            om = (1.0 - G) * (1.0 + G)
            F = (G * self._h(om) / om * (V @ m))[:, None]
            return F, _EPS * (4.0 + (4 * p + 4) * np.abs(G) * (Phi @ Rabs / lam) / om)

        r = sq.adaptive_rule(el, self.d, control, rtol=rtol or self.rtol)
        F, _ = control(r.V)
        return float(r.W @ F[:, 0])

def gibbs(X, y, lam: float, tau, **kw):
    """Stationary measure(s) of the mean-field dynamics by quadrature (THEORY §5).

    Parameters
    ----------
    X : array-like of shape (n, d), d in {1, 2}
    y : array-like of shape (n,)
    lam : float
        Weight decay ``λ > 0`` (on all of ``(a, w, b)``).
    tau : float or sequence of float
        Temperature(s) ``τ > 0``. A sequence is solved by continuation from hot to cold.
    **kw
        Options of :class:`GibbsReference` (``rtol``, ``tol``, ``max_newton``, ...).

    Returns
    -------
    GibbsSolution, or a list of them when ``tau`` is a sequence.

    Raises
    ------
    GibbsInputError
    GibbsConvergenceError
        No convergence, or a numerical failure (singular systems, overflow) on data whose
        magnitudes the quadrature cannot resolve.
    """
    from solvers.numerical import numerical_failures
    with numerical_failures(GibbsConvergenceError, "Gibbs reference", X):
        ref = GibbsReference(X, y, lam, **kw)
        sols = ref.solve(np.atleast_1d(tau))
    return sols if np.ndim(tau) else sols[0]
