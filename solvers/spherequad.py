"""Adaptive quadrature on the circle ``S¹`` and the sphere ``S²`` for integrands that are smooth
on the cells of an arrangement of great spheres ``{v : v·m_j = 0}`` and sharply peaked inside
or on the boundary of a cell.

This is the quadrature behind the finite-temperature reference (THEORY §5): with
``G(v) = Σ_j R_j (v·x̃_j)_+ / λ`` the integrands ``(1 − G²)^{−p}`` are analytic on every cell of
the arrangement of the lifted data (where ``G = c·v`` is linear), have kinks across the great
spheres ``v·x̃_j = 0``, and peak where ``|c·v|`` is largest on a cell.

Method
------
1. **Cells.** ``S¹``: arcs between consecutive zero angles of the ``v·m_j``. ``S²``: convex
   spherical polygons, clipped plane by plane.
   (The start is the eight sign cones of three independent planes, or of the coordinate
   planes when the data planes have rank < 3, so every cell lies in an open hemisphere.)
2. **Peaks.** Given one linear coefficient ``c`` per cell, the maximiser of ``|c·v|`` over the
   closed cell is found exactly (interior ``±c/|c|``, the maximum along each edge, or a vertex).
   Arcs are split there; polygons are fan-triangulated from it, so every element has the peak at
   a corner.
3. **Elements.** An arc ``[θ₀, θ₁]`` with Gauss–Legendre in ``θ``; a spherical triangle
   ``(A, B, C)`` (apex ``A`` at the peak) in collapsed coordinates
   ``p(s, t) = A + s(B − A) + s t (C − B)``, ``v = p/|p|``, with surface element
   ``dΩ = s |det(A, B, C)| / |p|³ ds dt`` and tensor Gauss–Legendre in ``(s, t)``.
4. **Adaptivity.** Each element's rule is compared with the sum over its two halves (``S²``:
   halved in ``s`` and, separately, in ``t``; the split with the larger discrepancy is taken). An
   element is accepted when, for every control integrand ``g_k``, the discrepancy is at most
   ``rtol · max(A_k · |e|/|S^d|, ∫_e |g_k|)`` with ``A_k ≈ ∫|g_k|`` over the sphere; the accepted
   rule is that of the halves. Summed over elements the error bound is ``≈ 2 rtol A_k``.

All functions are vectorised over elements; nothing here knows about neural networks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.polynomial.legendre import leggauss

#: Gauss–Legendre points per arc (``S¹``) and per direction of a triangle (``S²``).
ORDER_1D = 16
ORDER_2D = 8
#: Vertices closer than this to a clipping plane count as on it.
_CLIP_EPS = 1e-13


def _gl(m):
    x, w = leggauss(m)
    return 0.5 * (x + 1.0), 0.5 * w


# ---------------------------------------------------------------------------------------------
# cells of the arrangement
# ---------------------------------------------------------------------------------------------

@dataclass
class Cells:
    """Cells of the arrangement ``{v·m_j = 0}`` on ``S^d``.

    Attributes
    ----------
    d : int
        1 (circle in ``R²``) or 2 (sphere in ``R³``).
    arcs : ndarray of shape (C, 2)
        ``d = 1``: angle ranges ``[θ₀, θ₁]`` with ``θ₀ < θ₁`` (``v = (cos θ, sin θ)``).
    polys : list of ndarray of shape (k_c, 3)
        ``d = 2``: vertices (unit vectors) of each convex spherical polygon, counter-clockwise
        seen from outside.
    centers : ndarray of shape (C, d+1)
        An interior point of each cell (unit vector), for sign patterns.
    """

    d: int
    centers: np.ndarray
    arcs: np.ndarray | None = None
    polys: list | None = None

    @property
    def n_cells(self) -> int:
        return int(self.centers.shape[0])

    def patterns(self, normals) -> np.ndarray:
        """``1[m_j·center > 0]`` per cell: bool array of shape (C, k)."""
        return (self.centers @ np.asarray(normals, dtype=float).T) > 0.0


def arrangement(normals, d: int, base: Cells | None = None) -> Cells:
    """Cells of the arrangement of the great spheres ``{v·m_j = 0}`` on ``S^d``.

    Parameters
    ----------
    normals : array-like of shape (k, d+1)
        Plane normals ``m_j`` (need not be unit; zero rows are ignored).
    d : int
        1 or 2.
    base : Cells, optional
        Refine these cells instead of starting from the whole sphere (used to add a few planes
        to a cached arrangement).

    Returns
    -------
    Cells
    """
    M = np.asarray(normals, dtype=float).reshape(-1, d + 1)
    M = M[np.linalg.norm(M, axis=1) > 0]
    if d == 1:
        return _arcs(M, base)
    if d == 2:
        return _polygons(M, base)
    raise ValueError(f"arrangement: d must be 1 or 2, got {d}")


def _arcs(M, base):
    # zero angles of v·m = |m| cos(θ − φ_m): θ = φ_m ± π/2
    phi = np.arctan2(M[:, 1], M[:, 0])
    br = np.concatenate([phi + 0.5 * np.pi, phi - 0.5 * np.pi])
    if base is not None:
        br = np.concatenate([br, base.arcs[:, 0]])
    br = np.sort(np.mod(br, 2 * np.pi))
    if br.size:
        keep = np.concatenate([[True], np.diff(br) > 1e-14])
        br = br[keep]
        if br.size > 1 and (br[0] + 2 * np.pi - br[-1]) <= 1e-14:
            br = br[:-1]
    if br.size == 0:
        arcs = np.array([[0.0, 2 * np.pi]])
    else:
        arcs = np.stack([br, np.concatenate([br[1:], [br[0] + 2 * np.pi]])], axis=1)
    mid = 0.5 * (arcs[:, 0] + arcs[:, 1])
    return Cells(1, np.stack([np.cos(mid), np.sin(mid)], axis=1), arcs=arcs)


def _tri_solid_angle(a, b, c):
    """Solid angle of spherical triangles (Van Oosterom–Strackee), vectorised over rows."""
    num = np.abs(np.einsum("...i,...i->...", a, np.cross(b, c)))
    den = 1.0 + np.einsum("...i,...i->...", a, b) + np.einsum("...i,...i->...", b, c) \
        + np.einsum("...i,...i->...", c, a)
    return 2.0 * np.arctan2(num, den)


def polygon_area(P) -> float:
    """Area (solid angle) of a convex spherical polygon with unit vertices ``P`` (k, 3)."""
    if len(P) < 3:
        return 0.0
    return float(np.sum(_tri_solid_angle(P[0], P[1:-1], P[2:])))


def _clip(P, m):
    """Split the convex spherical polygon ``P`` by the plane ``v·m = 0``: (positive, negative)
    parts, each None when empty or degenerate."""
    s = P @ m
    s = np.where(np.abs(s) < _CLIP_EPS * np.linalg.norm(m), 0.0, s)
    if np.all(s >= 0):
        return P, None
    if np.all(s <= 0):
        return None, P
    pos, neg = [], []
    k = len(P)
    for i in range(k):
        p, q = P[i], P[(i + 1) % k]
        sp, sq = s[i], s[(i + 1) % k]
        if sp >= 0:
            pos.append(p)
        if sp <= 0:
            neg.append(p)
        if sp * sq < 0:
            x = p + (sp / (sp - sq)) * (q - p)
            x /= np.linalg.norm(x)
            pos.append(x)
            neg.append(x)
    out = []
    for Q in (pos, neg):
        Q = np.array(Q)
        out.append(Q if len(Q) >= 3 and polygon_area(Q) > 1e-15 else None)
    return out[0], out[1]


def _simplicial_start(M):
    """Eight spherical triangles: the sign cones of three independent rows of ``M`` (or of the
    coordinate planes when the rows have rank < 3), and the remaining rows."""
    picked = []
    for i in range(len(M)):
        cand = picked + [i]
        sv = np.linalg.svd(M[cand] / np.linalg.norm(M[cand], axis=1, keepdims=True),
                           compute_uv=False)
        if sv[-1] > 1e-6:
            picked = cand
        if len(picked) == 3:
            break
    if len(picked) == 3:
        B = M[picked] / np.linalg.norm(M[picked], axis=1, keepdims=True)
        rest = np.delete(M, picked, axis=0)
    else:
        B, rest = np.eye(3), M
    polys = []
    for s1 in (1, -1):
        for s2 in (1, -1):
            for s3 in (1, -1):
                S = np.array([s1, s2, s3], dtype=float)[:, None] * B
                # extreme rays of {v : S v >= 0}: the columns of S^{-1}
                tri = np.linalg.inv(S).T
                tri /= np.linalg.norm(tri, axis=1, keepdims=True)
                if np.linalg.det(tri) < 0:
                    tri = tri[[0, 2, 1]]
                polys.append(tri)
    return polys, rest


def _polygons(M, base):
    if base is None:
        polys, M = _simplicial_start(M)
    else:
        polys = list(base.polys)
    for m in M:
        nxt = []
        for P in polys:
            pos, neg = _clip(P, m)
            if pos is not None:
                nxt.append(pos)
            if neg is not None:
                nxt.append(neg)
        polys = nxt
    centers = np.array([P.sum(axis=0) / np.linalg.norm(P.sum(axis=0)) for P in polys])
    return Cells(2, centers, polys=polys)


def positive_parts(cells: Cells, m):
    """Split ``cells`` by the plane ``{v·m = 0}``.

    Returns
    -------
    inside : ndarray of int
        Cells contained in the closed half-space ``{v·m ≥ 0}``.
    parts : Cells
        The parts with ``v·m ≥ 0`` of the cells the plane cuts.
    parent : ndarray of int
        The cell each part came from.
    """
    m = np.asarray(m, dtype=float)
    tol = _CLIP_EPS * np.linalg.norm(m)
    inside, parent = [], []
    if cells.d == 1:
        arcs = []
        for i, (lo, hi) in enumerate(cells.arcs):
            th = np.array([lo, hi])
            sv = np.cos(th) * m[0] + np.sin(th) * m[1]
            if np.all(sv >= -tol):
                inside.append(i)
            elif np.any(sv > tol):
                z = np.arctan2(m[1], m[0]) + 0.5 * np.pi      # a zero of v·m
                z = np.array([z, z + np.pi])
                z = lo + np.mod(z - lo, 2 * np.pi)
                z = float(z[(z > lo) & (z < hi)][0])
                arcs.append([z, hi] if sv[1] > 0 else [lo, z])
                parent.append(i)
        arcs = np.array(arcs).reshape(-1, 2)
        mid = 0.5 * (arcs[:, 0] + arcs[:, 1])
        parts = Cells(1, np.stack([np.cos(mid), np.sin(mid)], axis=1), arcs=arcs)
    else:
        polys = []
        for i, P in enumerate(cells.polys):
            sv = P @ m
            if np.all(sv >= -tol):
                inside.append(i)
            elif np.any(sv > tol):
                pos, _ = _clip(P, m)
                if pos is not None:
                    polys.append(pos)
                    parent.append(i)
        centers = np.array([P.sum(axis=0) / np.linalg.norm(P.sum(axis=0)) for P in polys])
        parts = Cells(2, centers.reshape(-1, 3), polys=polys)
    return np.array(inside, dtype=np.int64), parts, np.array(parent, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# peaks of |c·v| on a cell
# ---------------------------------------------------------------------------------------------

def max_abs_linear(cells: Cells, C) -> tuple[float, np.ndarray]:
    """Exact ``max_v |c_cell·v|`` over all closed cells, and a maximiser.

    Parameters
    ----------
    cells : Cells
    C : ndarray of shape (n_cells, d+1)
        The linear coefficient of each cell.

    Returns
    -------
    (value, v) : (float, ndarray of shape (d+1,))
    """
    best, arg = -1.0, None
    for i in range(cells.n_cells):
        v = _cell_peak(cells, i, C[i])
        val = abs(float(C[i] @ v))
        if val > best:
            best, arg = val, v
    return best, arg


def _cell_peak(cells: Cells, i: int, c) -> np.ndarray:
    """The maximiser of ``|c·v|`` over the closed cell ``i`` (a unit vector)."""
    if cells.d == 1:
        lo, hi = cells.arcs[i]
        cand = [lo, hi]
        phi = np.arctan2(c[1], c[0])
        for t in (phi, phi + np.pi):
            t = lo + np.mod(t - lo, 2 * np.pi)
            if t < hi:
                cand.append(t)
        cand = np.array(cand)
        V = np.stack([np.cos(cand), np.sin(cand)], axis=1)
        return V[np.argmax(np.abs(V @ c))]
    P = cells.polys[i]
    nc = np.linalg.norm(c)
    if nc == 0.0:
        return cells.centers[i]
    cand = [P]
    Q = np.roll(P, -1, axis=0)
    edge_n = np.cross(P, Q)                                    # inward normals (ccw)
    chat = c / nc
    for u in (chat, -chat):
        if np.all(edge_n @ u >= -1e-15):
            cand.append(u[None])
    nn = edge_n / np.linalg.norm(edge_n, axis=1, keepdims=True)
    for sgn in (1.0, -1.0):
        ce = sgn * c - (nn @ (sgn * c))[:, None] * nn          # projection on each edge's plane
        ln = np.linalg.norm(ce, axis=1)
        ok = ln > 1e-9 * nc                                   # c not normal to the edge
        e = np.where(ok[:, None], ce / np.where(ok, ln, 1.0)[:, None], P)
        on = ok & (np.einsum("ij,ij->i", np.cross(P, e), nn) >= 0) \
            & (np.einsum("ij,ij->i", np.cross(e, Q), nn) >= 0)
        if np.any(on):
            cand.append(e[on])
    V = np.concatenate(cand, axis=0)
    return V[np.argmax(np.abs(V @ c))]


# ---------------------------------------------------------------------------------------------
# elements and the adaptive rule
# ---------------------------------------------------------------------------------------------

def initial_elements(cells: Cells, C) -> dict:
    """Elements with every cell's peak of ``|c·v|`` at an element corner.

    Returns a dict of arrays: ``d = 1``: ``lo, hi`` (E,); ``d = 2``: ``A, B, Cv`` (E, 3) and
    ``s0, s1, t0, t1`` (E,); both: ``cell`` (E,), the cell index of each element.
    """
    if cells.d == 1:
        lo, hi, cid = [], [], []
        for i in range(cells.n_cells):
            a, b = cells.arcs[i]
            v = _cell_peak(cells, i, C[i])
            t = a + np.mod(np.arctan2(v[1], v[0]) - a, 2 * np.pi)
            pts = [a, b]
            if a + 1e-13 < t < b - 1e-13:
                pts = [a, t, b]
            lo.extend(pts[:-1])
            hi.extend(pts[1:])
            cid.extend([i] * (len(pts) - 1))
        return {"lo": np.array(lo), "hi": np.array(hi), "cell": np.array(cid, dtype=np.int64)}
    As, Bs, Cs, cid = [], [], [], []
    for i in range(cells.n_cells):
        P = cells.polys[i]
        p = _cell_peak(cells, i, C[i])
        k = len(P)
        dist = np.linalg.norm(P - p, axis=1)
        if np.min(dist) < 1e-12:                                # peak at a vertex
            j = int(np.argmin(dist))
            P = np.roll(P, -j, axis=0)
            for q in range(1, k - 1):
                As.append(P[0]); Bs.append(P[q]); Cs.append(P[q + 1]); cid.append(i)
            continue
        for q in range(k):                                      # interior or on an edge
            b, c = P[q], P[(q + 1) % k]
            if abs(np.linalg.det(np.array([p, b, c]))) < 1e-15:  # p on this edge
                continue
            As.append(p); Bs.append(b); Cs.append(c); cid.append(i)
    E = len(As)
    return {"A": np.array(As).reshape(E, 3), "B": np.array(Bs).reshape(E, 3),
            "Cv": np.array(Cs).reshape(E, 3), "s0": np.zeros(E), "s1": np.ones(E),
            "t0": np.zeros(E), "t1": np.ones(E), "cell": np.array(cid, dtype=np.int64)}


def element_nodes(el: dict, d: int):
    """Quadrature nodes and weights of elements: ``V`` (E, Q, d+1), ``W`` (E, Q)."""
    if d == 1:
        x, w = _gl(ORDER_1D)
        h = el["hi"] - el["lo"]
        th = el["lo"][:, None] + h[:, None] * x[None, :]
        V = np.stack([np.cos(th), np.sin(th)], axis=-1)
        return V, h[:, None] * w[None, :]
    x, w = _gl(ORDER_2D)
    A, B, Cv = el["A"], el["B"], el["Cv"]
    ds, dt = el["s1"] - el["s0"], el["t1"] - el["t0"]
    s = el["s0"][:, None] + ds[:, None] * x[None, :]             # (E, m)
    t = el["t0"][:, None] + dt[:, None] * x[None, :]
    S = np.repeat(s, len(x), axis=1)                             # (E, m*m), s slow
    T = np.tile(t, (1, len(x)))
    P = A[:, None, :] + S[..., None] * ((B - A)[:, None, :] + T[..., None] * (Cv - B)[:, None, :])
    r = np.linalg.norm(P, axis=-1)
    det = np.abs(np.einsum("ij,ij->i", A, np.cross(B, Cv)))
    W = (np.outer(w, w).ravel()[None, :] * (ds * dt)[:, None] * S * det[:, None] / r ** 3)
    return P / r[..., None], W


def _halves(el: dict, d: int, axis: str = "s"):
    """The two halves of each element (concatenated: first halves, then second halves)."""
    a0, a1 = ("lo", "hi") if d == 1 else (axis + "0", axis + "1")
    mid = 0.5 * (el[a0] + el[a1])
    out = {k: np.concatenate([v, v], axis=0) for k, v in el.items()}
    out[a0] = np.concatenate([el[a0], mid])
    out[a1] = np.concatenate([mid, el[a1]])
    return out


def _take(el: dict, idx) -> dict:
    return {k: v[idx] for k, v in el.items()}


def _cat(els) -> dict:
    keys = els[0].keys()
    return {k: np.concatenate([e[k] for e in els], axis=0) for k in keys}


@dataclass
class Rule:
    """An adapted quadrature rule on ``S^d``.

    Attributes
    ----------
    V : ndarray of shape (M, d+1)     nodes (unit vectors)
    W : ndarray of shape (M,)         weights (surface measure; they sum to ``|S^d|``)
    cell : ndarray of shape (M,) int  the cell of each node
    error : ndarray of shape (K,)     estimated absolute error of each control integral
    abs_integral : ndarray (K,)       estimate of ``∫|g_k|``
    converged : bool                  every element met the tolerance
    n_elements : int
    """

    V: np.ndarray
    W: np.ndarray
    cell: np.ndarray
    error: np.ndarray
    abs_integral: np.ndarray
    converged: bool
    n_elements: int


def adaptive_rule(elements: dict, d: int, control, rtol: float = 1e-12,
                  max_levels: int = 60, max_nodes: int = 4_000_000) -> Rule:
    """Refine ``elements`` until the control integrals are resolved.

    Parameters
    ----------
    elements : dict
        From :func:`initial_elements`.
    d : int
        1 or 2.
    control : callable
        ``control(V) -> (F, noise)``: ``F`` (M, K) the integrands to resolve at nodes ``V``
        (M, d+1); ``noise`` (M,) their relative round-off at the nodes (e.g. ``eps/(1 − |G|)``
        where ``1 − G²`` cancels), or None. An element whose discrepancy is below
        ``8 Σ_q W_q |g_k(v_q)| noise(v_q)`` is accepted: refining it cannot help.
    rtol : float
        Relative tolerance (see the module docstring for the criterion).
    max_levels : int
        Bisection levels at most; elements still unresolved then are accepted and the rule is
        flagged ``converged=False``.
    max_nodes : int
        Same, when a level would evaluate more nodes than this.

    Returns
    -------
    Rule
    """
    total = 2 * np.pi if d == 1 else 4 * np.pi

    def integrate(el):
        V, W = element_nodes(el, d)
        E, Q = W.shape
        F, noise = control(V.reshape(E * Q, d + 1))
        F = F.reshape(E, Q, -1)
        Fa = np.abs(F)
        Qa = np.einsum("eq,eqk->ek", W, Fa)
        if noise is not None:
            Qn = 8.0 * np.einsum("eq,eqk->ek", W * noise.reshape(E, Q), Fa)
        else:
            Qn = np.zeros_like(Qa)
        return V, W, np.einsum("eq,eqk->ek", W, F), Qa, Qn

    active = elements
    _, _, Qp, _, _ = integrate(active)
    accV, accW, accC = [], [], []
    err_sum = np.zeros(Qp.shape[1])
    acc_abs = np.zeros(Qp.shape[1])
    A_est = None
    converged = True
    n_el = 0
    for level in range(max_levels + 1):
        E = Qp.shape[0]
        if E == 0:
            break
        axes = ["s"] if d == 1 else ["s", "t"]
        cand = []
        for ax in axes:
            ch = _halves(active, d, ax)
            Vc, Wc, Qc, Qa, Qn = integrate(ch)
            Qsum = Qc[:E] + Qc[E:]
            err = np.abs(Qsum - Qp)
            cand.append((ch, Vc, Wc, Qc, Qa, err, Qn[:E] + Qn[E:]))
        if d == 2:
            pick_t = cand[1][5].max(axis=1) > cand[0][5].max(axis=1)
            # the split along the direction with the larger discrepancy is refined further;
            # for acceptance use the discrepancy of that split as well
            use = [np.nonzero(~pick_t)[0], np.nonzero(pick_t)[0]]
        else:
            use = [np.arange(E)]
        err = np.empty_like(Qp)
        Qabs = np.empty_like(Qp)
        floor = np.empty_like(Qp)
        for (_ch, _Vc, _Wc, _Qc, Qa, er, qn), idx in zip(cand, use):
            err[idx] = er[idx]
            Qabs[idx] = Qa[idx] + Qa[E + idx]
            floor[idx] = qn[idx]
        area = np.empty(E)
        for (_ch, _Vc, Wc, _Qc, _Qa, _er, _qn), idx in zip(cand, use):
            area[idx] = Wc[idx].sum(axis=1) + Wc[E + idx].sum(axis=1)
        tot_abs = acc_abs + Qabs.sum(axis=0)
        A_est = tot_abs if A_est is None else np.maximum(A_est, tot_abs)
        tol = np.maximum(rtol * np.maximum(A_est[None, :] * (area / total)[:, None], Qabs),
                         floor)
        ok = np.all(err <= tol, axis=1) | (area < 1e-300)
        last = level == max_levels
        nxt_el, nxt_Q = [], []
        for (ch, Vc, Wc, Qc, Qa, er, _qn), idx in zip(cand, use):
            good = idx[ok[idx]] if not last else idx
            bad = idx[~ok[idx]] if not last else idx[:0]
            for half in (good, E + good):
                accV.append(Vc[half].reshape(-1, d + 1))
                accW.append(Wc[half].ravel())
                accC.append(np.repeat(ch["cell"][half], Wc.shape[1]))
            n_el += 2 * len(good)
            err_sum += er[good].sum(axis=0)
            acc_abs += Qa[good].sum(axis=0) + Qa[E + good].sum(axis=0)
            if len(bad):
                both = np.concatenate([bad, E + bad])
                nxt_el.append(_take(ch, both))
                nxt_Q.append(Qc[both])
        if last and not np.all(ok):
            converged = False
        if not nxt_el:
            break
        active = _cat(nxt_el)
        Qp = np.concatenate(nxt_Q, axis=0)
        q_per = ORDER_1D if d == 1 else ORDER_2D ** 2
        if Qp.shape[0] * q_per * (2 if d == 1 else 4) > max_nodes:
            V, W = element_nodes(active, d)
            accV.append(V.reshape(-1, d + 1))
            accW.append(W.ravel())
            accC.append(np.repeat(active["cell"], W.shape[1]))
            n_el += Qp.shape[0]
            converged = False
            break
    V = np.concatenate(accV, axis=0)
    W = np.concatenate(accW)
    return Rule(V, W, np.concatenate(accC), err_sum, A_est if A_est is not None else acc_abs, converged, n_el)
