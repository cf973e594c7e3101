"""Zero-temperature reference: the convex problem over signed measures on ``S^d`` (THEORY §4).

    min_μ  (1/(2n)) Σ_j ( ∫ (v·x̃_j)_+ dμ(v) − y_j )²  +  λ ‖μ‖_TV

For every realisable activation pattern ``s`` (:mod:`solvers.activation_regions`) the map
``v ↦ ((v·x̃_j)_+)_j`` is linear on the closed cone ``K_s``: it is ``A_s v`` with
``A_s = diag(s) X̃``. Collapsing the positive (negative) part of ``μ`` on ``K_s`` to its barycentre
``u_s = ∫_{K_s} v dμ₊ ∈ K_s`` (``u'_s`` for ``μ₋``) keeps the fit and does not increase the total
variation (``|u_s| ≤ μ₊(K_s)``, equal when ``μ₊`` sits on one ray), so the problem equals the
second-order cone programme [Pilanci & Ergen, ICML 2020]

    min  (1/(2n)) |Σ_s A_s (u_s − u'_s) − y|²  +  λ Σ_s (|u_s| + |u'_s|),   u_s, u'_s ∈ K_s,

solved here with Clarabel (interior point), then once more on the active groups only (a
smaller, better conditioned programme; kept when its certificate is better). Every nonzero
``u_s`` is a ray: direction ``u_s/|u_s|``, weight ``c = +|u_s|`` (``−|u'_s|``); rays with one
direction and sign are merged.

Certificate (THEORY §4): with ``R = (f − y)/n`` and ``G(v) = (1/λ) Σ_j R_j (v·x̃_j)_+``, optimality
means ``max_v |G| ≤ 1`` with ``G(v_k) = −sign(c_k)`` on every ray. ``max|G|`` is computed exactly,
per pattern, as the norm of the projection of ``±A_sᵀR/λ`` on ``K_s`` (Moreau decomposition,
``scipy.optimize.nnls``). The duality gap uses the dual ``max_R −R·y − (n/2)|R|²`` s.t.
``max|G_R| ≤ 1``, at ``R/max(1, max|G|)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import clarabel
import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

from solvers.activation_regions import TooManyPatterns, activation_patterns
from solvers.errors import InputError
from solvers.geometry import kink_hyperplanes, lifted
from solvers.inputs import check_xy

#: Inputs the convex reference cannot take (``lam <= 0``, NaN data, too many patterns): the
#: package's :class:`solvers.errors.InputError` (bad arrays: its subclass ``DataError``).
ConvexInputError = InputError


class ConvexSolverError(RuntimeError):
    """The conic solver did not reach an optimal solution."""


@dataclass
class ConvexSolution:
    """The ``τ → 0`` reference.

    Attributes
    ----------
    X : ndarray (n, d); y : ndarray (n,); lam : float
    f_train : ndarray of shape (n,)
        The predictor on the training inputs (unique: the objective is strictly convex in it).
    R : ndarray of shape (n,)
        ``(f_train − y)/n``.
    directions : ndarray of shape (K, d+1)
        Unit ray directions ``v_k = (w, b)/|(w, b)|``.
    weights : ndarray of shape (K,)
        Signed weights ``c_k`` (the limit predictor is ``Σ_k c_k (v_k·x̃)_+``, THEORY §6).
    max_abs_G : float
        Exact ``max_v |G(v)|``.
    G_rays : ndarray of shape (K,)
        ``G(v_k)``; optimality requires ``G(v_k) = −sign(c_k)``.
    primal, dual, duality_gap : float
        Objective, dual bound and their difference (absolute).
    n_patterns : int
        Realisable activation patterns used.
    """

    X: np.ndarray
    y: np.ndarray
    lam: float
    f_train: np.ndarray
    R: np.ndarray
    directions: np.ndarray
    weights: np.ndarray
    max_abs_G: float
    G_rays: np.ndarray
    primal: float
    dual: float
    duality_gap: float
    n_patterns: int
    solver_status: str = ""
    _kinks: list = field(default=None, repr=False)

    @property
    def signs(self) -> np.ndarray:
        return np.sign(self.weights).astype(int)

    def predict(self, x) -> np.ndarray:
        """``f(x) = Σ_k c_k (v_k·x̃)_+`` at inputs ``x`` (m, d)."""
        x = np.asarray(x, dtype=float).reshape(-1, self.X.shape[1])
        xt = lifted(x)
        return np.maximum(xt @ self.directions.T, 0.0) @ self.weights

    def G(self, V) -> np.ndarray:
        """``G(v)`` at unit directions ``V`` (m, d+1)."""
        Xt = lifted(self.X)
        return np.maximum(np.asarray(V, dtype=float) @ Xt.T, 0.0) @ self.R / self.lam

    def kinks(self, tol: float = 1e-6) -> list:
        """Kink hyperplanes ``{x : normal·x = offset}`` of the rays (THEORY §6), ``v`` and
        ``−v`` merged, pure-bias rays (``|w| ≤ tol``) giving none: a list of
        ``(normal (d,), offset)``."""
        ks = kink_hyperplanes(self.directions, angle_tol=tol, offset_tol=tol, pure_bias_tol=tol)
        return [(k.normal, float(k.offset)) for k in ks]

    def certificate_error(self) -> float:
        """``max(|max|G| − 1|, max_k |G(v_k) + sign(c_k)|)`` when ``f ≢ 0``; else
        ``max(0, max|G| − 1)``."""
        if len(self.weights) == 0:
            return max(0.0, self.max_abs_G - 1.0)
        return float(max(abs(self.max_abs_G - 1.0),
                         np.max(np.abs(self.G_rays + np.sign(self.weights)))))

    def as_dict(self) -> dict:
        """The ``reference convex --json`` document."""
        return {"f_train": [float(v) for v in self.f_train],
                "rays": [{"direction": [float(t) for t in v], "sign": int(np.sign(c)),
                          "weight": float(c)} for v, c in zip(self.directions, self.weights)],
                "kinks": [{"normal": [float(t) for t in nrm], "offset": float(off)}
                          for nrm, off in self.kinks()],
                "max_abs_G": float(self.max_abs_G), "duality_gap": float(self.duality_gap),
                "primal": float(self.primal), "certificate_error": self.certificate_error(),
                "n_patterns": int(self.n_patterns)}


def _cone_rows(s, Xt):
    """``B_s = diag(2s − 1) X̃``: ``K_s = {u : B_s u ≥ 0}``."""
    return (2.0 * s - 1.0)[:, None] * Xt


def cell_maxima(R, X, lam, patterns=None):
    """Maximum of ``±G_R`` on every closed activation cell ``K_s ∩ S^d``, with its maximiser.

    On ``K_s`` the certificate is linear, ``G = c_s·v`` with ``c_s = Σ_{j∈s} R_j x̃_j / λ``;
    ``max_{v ∈ K_s, |v|=1} ±c_s·v`` is the norm of the projection of ``±c_s`` on ``K_s``
    (Moreau decomposition, ``scipy.optimize.nnls``), attained at the projection's direction.

    Parameters
    ----------
    R : ndarray (n,); X : ndarray (n, d); lam : float
    patterns : ndarray (P, n) bool, optional
        The realisable patterns of ``X`` (computed when omitted).

    Returns
    -------
    values : ndarray (P, 2)
        ``max ±G`` on each cell (column 0: ``+G``, column 1: ``−G``); 0 where ``±c_s`` points
        away from the cone.
    argmax : ndarray (P, 2, d+1)
        Unit maximisers (zero rows where the value is 0).
    coeffs : ndarray (P, d+1)
        ``c_s``.
    """
    X = np.asarray(X, dtype=float).reshape(len(R), -1)
    Xt = lifted(X)
    if patterns is None:
        patterns, _ = activation_patterns(X)
    P, D = len(patterns), Xt.shape[1]
    vals, args, C = np.zeros((P, 2)), np.zeros((P, 2, D)), np.zeros((P, D))
    for k, s in enumerate(patterns):
        c = (Xt[s].T @ R[s]) / lam
        C[k] = c
        B = _cone_rows(s, Xt)
        for i, sgn in enumerate((1.0, -1.0)):
            mu, _ = nnls(-B.T, sgn * c)
            proj = sgn * c + B.T @ mu                  # projection of sgn·c on K_s
            val = float(np.linalg.norm(proj))
            if val > 0:
                vals[k, i], args[k, i] = val, proj / val
    return vals, args, C


def max_abs_G(R, X, lam, patterns=None):
    """Exact ``max_v |G_R(v)|`` over ``S^d`` and a maximiser ``v`` (d+1,): the largest of
    :func:`cell_maxima` (same parameters)."""
    vals, args, _ = cell_maxima(R, X, lam, patterns)
    k, i = np.unravel_index(int(np.argmax(vals)), vals.shape)
    if vals[k, i] <= 0:
        return 0.0, np.zeros(args.shape[2])
    return float(vals[k, i]), args[k, i]


def convex(X, y, lam: float, *, tol: float = 1e-12, ray_tol: float = 1e-7,
           merge_angle: float = 1e-5, max_patterns: int = 20_000) -> ConvexSolution:
    """Solve the ``τ → 0`` convex problem (THEORY §4) for any ``d``.

    Parameters
    ----------
    X : array-like of shape (n, d)
    y : array-like of shape (n,)
    lam : float
        Weight decay ``λ > 0``.
    tol : float
        Clarabel's gap and feasibility tolerances (an "almost solved" status, which Clarabel
        reports at reduced accuracy, is accepted; :meth:`ConvexSolution.certificate_error`
        measures what was reached).
    ray_tol : float
        Groups with ``|u_s| ≤ ray_tol · max(Σ|u|, max|y| / max|x̃|)`` are dropped
        (interior-point residue).
    merge_angle : float
        Rays of one sign closer than this (radians) are merged.
    max_patterns : int
        Refuse data whose arrangement has more regions (the programme has ``4P(d+2)``
        variables).

    Returns
    -------
    ConvexSolution

    Raises
    ------
    ConvexInputError
        Bad shapes, NaN, ``lam <= 0``, or more than ``max_patterns`` patterns.
    ConvexSolverError
        Clarabel did not report an optimal (or almost optimal) solution.
    """
    from solvers.numerical import numerical_failures
    with numerical_failures(ConvexSolverError, "convex reference", X):
        return _convex(X, y, lam, tol=tol, ray_tol=ray_tol, merge_angle=merge_angle,
                       max_patterns=max_patterns)


def _convex(X, y, lam: float, *, tol: float = 1e-12, ray_tol: float = 1e-7,
            merge_angle: float = 1e-5, max_patterns: int = 20_000) -> ConvexSolution:
    """The body of :func:`convex`."""
    X, y = check_xy(X, y, "<convex>")
    if not (lam > 0 and math.isfinite(lam)):
        raise ConvexInputError("<convex>", "lam", f"must be a finite number > 0, got {lam!r}")
    n, d = X.shape
    Xt = lifted(X)
    try:
        pats, _ = activation_patterns(X, max_patterns=max_patterns)
    except TooManyPatterns as exc:
        raise ConvexInputError("<convex>", "X", f"{exc}; the pattern programme is too large") \
            from None
    P = pats.shape[0]
    gp = np.concatenate([pats, pats])                 # groups: u_s (sign +), u'_s (sign −)
    gs = np.concatenate([np.ones(P), -np.ones(P)])
    U, status = _socp(Xt, y, lam, gp, gs, tol)
    norms = np.linalg.norm(U, axis=1)
    scale = max(norms.sum(), float(np.max(np.abs(y))) / float(np.max(np.linalg.norm(Xt, axis=1))))
    best = _solution(X, Xt, y, lam, pats, U, gs, ray_tol * scale, merge_angle, status)
    act = norms > ray_tol * scale
    if np.any(act) and best.certificate_error() > 0:
        # polish: the same programme on the active groups only (better conditioned); kept
        # when its certificate, checked against all patterns, is better
        try:
            U2, st2 = _socp(Xt, y, lam, gp[act], gs[act], tol)
            cand = _solution(X, Xt, y, lam, pats, U2, gs[act], ray_tol * scale, merge_angle,
                             st2)
            if cand.certificate_error() < best.certificate_error():
                best = cand
        except ConvexSolverError:
            pass
    return best


def _socp(Xt, y, lam, gp, gs, tol):
    """Solve ``min (1/2n)|Σ_g gs_g A_g u_g − y|² + λ Σ_g |u_g|``, ``u_g ∈ K_{gp_g}`` with
    Clarabel; returns ``U`` (G, d+1) and the status string."""
    n, D = Xt.shape
    G = len(gs)
    nu = G * D                                        # u variables
    it = nu                                           # t variables start
    ie = nu + G                                       # e variables start
    nvar = ie + n
    # objective: (1/2n)|e|^2 + lam * sum t
    Pm = sp.csc_matrix((np.full(n, 1.0 / n), (np.arange(ie, nvar), np.arange(ie, nvar))),
                       shape=(nvar, nvar))
    q = np.zeros(nvar)
    q[it:ie] = lam
    # zero cone: e − Σ gs_g A_g u_g = −y
    blocks_eq = [sp.csc_matrix(-gs[g] * (gp[g][:, None] * Xt)) for g in range(G)]
    A_eq = sp.hstack(blocks_eq + [sp.csc_matrix((n, G)), sp.identity(n, format="csc")])
    # nonnegative cone: B_s u_g >= 0  ->  row −B_s, b = 0
    B = sp.block_diag([sp.csc_matrix(-_cone_rows(gp[g], Xt)) for g in range(G)])
    A_nn = sp.hstack([B, sp.csc_matrix((G * n, G + n))])
    # second-order cones: (t_g, u_g)
    rows, cols = [], []
    for g in range(G):
        base = g * (D + 1)
        rows.append(base)
        cols.append(it + g)
        for k in range(D):
            rows.append(base + 1 + k)
            cols.append(g * D + k)
    A_soc = sp.csc_matrix((-np.ones(len(rows)), (rows, cols)), shape=(G * (D + 1), nvar))
    A = sp.vstack([A_eq, A_nn, A_soc], format="csc")
    b = np.concatenate([-y, np.zeros(G * n), np.zeros(G * (D + 1))])
    cones = [clarabel.ZeroConeT(n), clarabel.NonnegativeConeT(G * n)] + \
        [clarabel.SecondOrderConeT(D + 1) for _ in range(G)]
    st = clarabel.DefaultSettings()
    st.verbose = False
    st.tol_gap_abs = tol
    st.tol_gap_rel = tol
    st.tol_feas = tol
    st.max_iter = 500
    sol = clarabel.DefaultSolver(sp.triu(Pm, format="csc"), q, A, b, cones, st).solve()
    status = str(sol.status)
    if "Solved" not in status:
        raise ConvexSolverError(f"convex reference: Clarabel ended with status {status}")
    return np.asarray(sol.x)[:nu].reshape(G, D), status


def _solution(X, Xt, y, lam, pats, U, gs, thr, merge_angle, status):
    """Rays, predictor, certificate and duality gap of the group variables ``U``."""
    n = len(y)
    norms = np.linalg.norm(U, axis=1)
    keep = norms > thr
    dirs = U[keep] / norms[keep, None]
    wts = gs[keep] * norms[keep]
    dirs, wts = _merge(dirs, wts, merge_angle)
    f = np.maximum(Xt @ dirs.T, 0.0) @ wts if len(wts) else np.zeros(n)
    R = (f - y) / n
    mg, _ = max_abs_G(R, X, lam, pats)
    G_rays = np.maximum(dirs @ Xt.T, 0.0) @ R / lam if len(wts) else np.zeros(0)
    primal = 0.5 / n * float((f - y) @ (f - y)) + lam * float(np.abs(wts).sum())
    Rd = R / max(1.0, mg)
    dual = -float(Rd @ y) - 0.5 * n * float(Rd @ Rd)
    return ConvexSolution(X=X, y=y, lam=float(lam), f_train=f, R=R, directions=dirs,
                          weights=wts, max_abs_G=mg, G_rays=G_rays, primal=primal, dual=dual,
                          duality_gap=primal - dual, n_patterns=len(pats), solver_status=status)


def _merge(dirs, wts, angle):
    """Merge rays of one sign whose directions are within ``angle``; weight-averaged direction."""
    order = np.argsort(-np.abs(wts))
    out_d, out_w = [], []
    for k in order:
        for m in range(len(out_d)):
            if np.sign(out_w[m]) == np.sign(wts[k]) and \
                    np.linalg.norm(out_d[m] - dirs[k]) <= 2 * math.sin(angle / 2):
                tot = abs(out_w[m]) + abs(wts[k])
                v = (abs(out_w[m]) * out_d[m] + abs(wts[k]) * dirs[k]) / tot
                out_d[m] = v / np.linalg.norm(v)
                out_w[m] += wts[k]
                break
        else:
            out_d.append(dirs[k].copy())
            out_w.append(float(wts[k]))
    D = dirs.shape[1] if dirs.ndim == 2 else 0
    return np.array(out_d).reshape(-1, D), np.array(out_w)
