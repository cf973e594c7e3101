"""Kink hyperplanes of rays decided against the training inputs (THEORY §6.3).

The kink of a direction ``v = (w, b)`` with ``w ≠ 0`` is ``{x : normal·x = offset}``
(:func:`solvers.geometry.hyperplane`). With the training inputs given:

* a direction gives no kink when ``|w| ≤ pure_bias_tol·|v|`` (pure bias) or when its
  hyperplane misses the data's bounding box by more than ``box_margin`` times the data's
  spread ``s`` (RMS distance of the inputs to their mean): such a kink is not seen by the data;
* two rays share a hyperplane only when their hyperplanes coincide within ``rel_tol·s`` (the
  signed distances ``normal·x − offset`` of the two differ by at most that at every training
  input and every corner of the bounding box) and they split the training inputs the same way
  up to the points on the kink (THEORY §7, docs/theory.md §6.6): with the patterns of the two
  oriented alike, every input ``x_j`` where they differ lies on both kinks, i.e. within each
  ray's zero tolerance (its pattern is 0 there, or its direction is within ``zero_tol`` radians
  of ``x̃_j``'s hyperplane). A data point on a kink belongs to neither side.
"""

from __future__ import annotations

import numpy as np

from solvers.geometry import Kink, hyperplane

#: Default tolerance of :func:`data_kinks`, a fraction of the data's spread. Two rays that split
#: the data alike and whose hyperplanes are closer than this are one kink at the resolution of
#: the data; particle rays scatter their offsets by about their angular spread times ``|x̃|``
#: (measured: up to 4 % of the spread on [SKM22] D2 at N = 500).
KINK_REL_TOL = 0.05


def data_spread(X) -> float:
    """RMS distance of the inputs ``X`` (n, d) to their mean (input units; 1 when it is 0)."""
    X = np.asarray(X, dtype=float).reshape(np.shape(X)[0], -1)
    s = float(np.sqrt(np.mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1))))
    return s if s > 0 else 1.0


def _probe_points(X, max_corners: int = 1024):
    """Training inputs and the corners of their bounding box (corners only while
    ``2^d ≤ max_corners``)."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    d = X.shape[1]
    if 2 ** d > max_corners:
        return X
    bits = (np.arange(2 ** d)[:, None] >> np.arange(d)[None, :]) & 1
    return np.vstack([X, np.where(bits, hi, lo)])


def _same_split(pk, pl, near_k, near_l) -> bool:
    """Patterns ``pk``, ``pl`` (n,) split the inputs alike, up to a global sign, except at
    inputs on both kinks (``near_k & near_l``)."""
    both = near_k & near_l
    return any(np.all((pk == o * pl) | both) for o in (1, -1))


def data_kinks(ray_directions, X, patterns=None, *, rel_tol: float = KINK_REL_TOL,
               pure_bias_tol: float = 1e-3, box_margin: float = 1.0,
               zero_tol=None) -> list:
    """Distinct kink hyperplanes of rays, decided against the training inputs (module
    docstring).

    Parameters
    ----------
    ray_directions : array-like of shape (J, d+1)
        Directions ``v_k = (w, b)`` (normalised inside).
    X : ndarray of shape (n, d)
        Training inputs.
    patterns : array-like of shape (J, n), optional
        Ternary patterns of the rays (default: ``sign(v·x̃_j)`` with the default angular
        tolerance of :func:`analysis.ternary.ternary_pattern`).
    rel_tol : float, default :data:`KINK_REL_TOL` (0.05)
        Two hyperplanes coincide when their signed distances differ by at most ``rel_tol``
        times the data's spread at every input and box corner.
    pure_bias_tol : float, default 1e-3
        ``|w| ≤ pure_bias_tol·|v|``: pure bias, no kink.
    box_margin : float, default 1.0
        A hyperplane further than ``box_margin`` spreads from the bounding box gives no kink.
    zero_tol : float or array-like of shape (J,), optional
        Angle (radians) within which ray ``k``'s direction counts as on ``x̃_j``'s hyperplane
        when two splits are compared (default: the angular tolerance of
        :func:`analysis.ternary.ternary_pattern`; for particle rays the larger of that and three
        times the ray's spread, :func:`ray_kinks`, docs/theory.md §6.6).

    Returns
    -------
    list of Kink
        Each with the indices of its rays; rays without a kink are in no ``Kink``.

    Raises
    ------
    ValueError
        Directions not of shape (J, d+1), or patterns not of shape (J, n).
    """
    from analysis.ternary import ternary_pattern
    X = np.asarray(X, dtype=float).reshape(np.shape(X)[0], -1)
    dirs = np.asarray(ray_directions, dtype=float)
    if dirs.size == 0:
        return []
    dirs = dirs.reshape(-1, dirs.shape[-1])
    if dirs.shape[1] != X.shape[1] + 1:
        raise ValueError(f"directions must have shape (J, d+1) = (J, {X.shape[1] + 1}), "
                         f"got {dirs.shape}")
    dirs = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    if patterns is None:
        pats = np.array([ternary_pattern(v, X)[0] for v in dirs], dtype=int)
    else:
        pats = np.asarray(patterns, dtype=int).reshape(len(dirs), -1)
        if pats.shape[1] != X.shape[0]:
            raise ValueError(f"patterns must have shape (J, n) = ({len(dirs)}, {X.shape[0]}), "
                             f"got {pats.shape}")
    from analysis.ternary import ANGLE_TOL
    from solvers.geometry import lifted
    ztol = np.broadcast_to(np.asarray(ANGLE_TOL if zero_tol is None else zero_tol,
                                      dtype=float), (len(dirs),))
    L = lifted(X)
    zang = np.arcsin(np.clip(np.abs(dirs @ L.T) / np.linalg.norm(L, axis=1), 0.0, 1.0))
    near = (zang <= ztol[:, None]) | (pats == 0)            # (J, n): x_j on ray k's kink
    s = data_spread(X)
    probes = _probe_points(X)
    lo, hi = X.min(axis=0), X.max(axis=0)
    kinks: list[Kink] = []
    members: list[tuple] = []          # per kink: (pattern, signed distances at the probes)
    for k, v in enumerate(dirs):
        h = hyperplane(v, pure_bias_tol)
        if h is None:
            continue
        normal, offset = h
        # range of normal·x over the bounding box, and the hyperplane's distance to it
        pmin = float(np.sum(np.minimum(normal * lo, normal * hi)))
        pmax = float(np.sum(np.maximum(normal * lo, normal * hi)))
        if max(pmin - offset, offset - pmax, 0.0) > box_margin * s:
            continue
        dist = probes @ normal - offset
        for kk, (k0, d0) in zip(kinks, members):
            if (np.max(np.abs(d0 - dist)) <= rel_tol * s
                    and _same_split(pats[k0], pats[k], near[k0], near[k])):
                kk.rays.append(k)
                break
        else:
            kinks.append(Kink(normal, offset, [k]))
            members.append((k, dist))
    return kinks


def ray_kinks(rays, X, angle_tol: float | None = None, spread_factor: float = 3.0,
              **kw) -> list:
    """:func:`data_kinks` of particle rays (:class:`analysis.rays.Ray`): their directions and
    patterns, with each ray's zero tolerance the larger of ``angle_tol`` (default: the pattern
    tolerance's) and ``spread_factor`` times its spread (the radius within which a particle
    joins a ray, ``absorb`` of :func:`analysis.rays.find_rays`; docs/theory.md §6.6).

    Parameters
    ----------
    rays : list of Ray
        Or anything with ``direction``, ``pattern`` and ``spread`` (the exact Gibbs measure's
        rays' mean directions, :mod:`analysis.gibbs_rays`).
    X : ndarray of shape (n, d)
    angle_tol : float, optional
    spread_factor : float, default 3
    **kw
        Passed to :func:`data_kinks` (``rel_tol``, ``pure_bias_tol``, ``box_margin``).

    Returns
    -------
    list of Kink
    """
    from analysis.ternary import ANGLE_TOL
    if not rays:
        return []
    a = ANGLE_TOL if angle_tol is None else float(angle_tol)
    return data_kinks([q.direction for q in rays], X, [q.pattern for q in rays],
                      zero_tol=[max(a, spread_factor * q.spread) for q in rays], **kw)
