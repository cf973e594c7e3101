"""numba kernel counting the regions of a hyperplane arrangement (used by
:mod:`analysis.dichotomies`). With the private kernel modules of the particle solver
(``solvers._kernels`` and the modules it draws on) the only numba code of the project.

``region_count`` counts the regions of a central hyperplane arrangement in ``R^D`` by the
incremental deletion–restriction recursion (THEORY §6.2)::

    r({H_1..H_m}) = 1 + Σ_k r({H_1..H_{k-1}} restricted to H_k)

with the hyperplanes of every restriction merged when they coincide. Base cases: no hyperplane
gives 1 region; in ``R^2`` ``m`` distinct lines give ``2m``; in ``R^1`` one point gives 2.
``region_count`` does it in one call; :func:`distinct_normals` and :func:`walk` do it in slices
whose state lives in arrays, so that a caller returns to Python between two (signals, progress;
:func:`analysis.dichotomies.count_dichotomies`).

Numerics: every normal is a unit vector. The restriction to ``H_k`` is computed in an
orthonormal basis of ``H_k`` (a Householder reflection), so angles are preserved. Two hyperplanes
coincide when the chord distance of their unit normals up to sign, ``min(|p − q|, |p + q|)``, is at
most ``tol`` (computed from the differences, never from ``1 − |p·q|``, which loses all digits
below 1e-8); in ``R^2`` the same test is done on the sorted line angles modulo π. The kernel
records the largest distance it merged and the smallest distance it kept apart, so a caller can
see how far the decisions are from the tolerance.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from solvers._numba_cache import install as _install_cache_fallbacks

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note

_PI = np.pi


@nb.njit(cache=True)
def _restrict(buf, depth, k, D, out, tol, stats):
    """Restrict hyperplanes ``buf[depth, :k, :D]`` to ``H = buf[depth, k]``; write the distinct
    unit normals (in an orthonormal basis of ``H``, dimension ``D − 1``) to ``out`` and return
    their number."""
    h = buf[depth, k]
    last = D - 1
    s = 1.0 if h[last] >= 0.0 else -1.0
    ww = 0.0
    for c in range(last):
        ww += h[c] * h[c]
    wl = h[last] + s
    ww += wl * wl
    cnt = 0
    p = np.empty(last)
    for i in range(k):
        a = buf[depth, i]
        dot = 0.0
        for c in range(last):
            dot += h[c] * a[c]
        dot += wl * a[last]
        coef = 2.0 * dot / ww
        nrm = 0.0
        for c in range(last):
            p[c] = a[c] - coef * h[c]
            nrm += p[c] * p[c]
        nrm = np.sqrt(nrm)
        if nrm <= tol:                      # H_i coincides with H: not a hyperplane of H
            if nrm > stats[0]:
                stats[0] = nrm
            continue
        if nrm < stats[1]:
            stats[1] = nrm
        for c in range(last):
            p[c] /= nrm
        cnt = _add_if_new(p, out, cnt, last, tol, stats)
    return cnt


@nb.njit(cache=True)
def _add_if_new(p, out, cnt, last, tol, stats):
    """Append the unit normal ``p[:last]`` to ``out[:cnt]`` unless one of them lies within chord
    distance ``tol`` of ``±p`` (the same hyperplane); record the decision margins in ``stats``
    (largest merged, smallest kept distance). Returns the new count."""
    best = 4.0
    for j in range(cnt):
        sdot = 0.0
        for c in range(last):
            sdot += p[c] * out[j, c]
        sg = 1.0 if sdot >= 0.0 else -1.0
        d2 = 0.0
        for c in range(last):
            e = p[c] - sg * out[j, c]
            d2 += e * e
        if d2 < best:
            best = d2
    best = np.sqrt(best)
    if cnt > 0 and best <= tol:
        if best > stats[0]:
            stats[0] = best
        return cnt
    if cnt > 0 and best < stats[1]:
        stats[1] = best
    for c in range(last):
        out[cnt, c] = p[c]
    return cnt + 1


@nb.njit(cache=True)
def _lines_in_plane(buf, depth, k, ang, tol, stats):
    """Number of distinct lines of ``buf[depth, :k]`` restricted to ``H = buf[depth, k]``, for
    ``D = 3`` (the restriction lives in ``R^2``); lines are compared by angle modulo π."""
    h = buf[depth, k]
    s = 1.0 if h[2] >= 0.0 else -1.0
    wl = h[2] + s
    ww = h[0] * h[0] + h[1] * h[1] + wl * wl
    m = 0
    for i in range(k):
        a = buf[depth, i]
        coef = 2.0 * (h[0] * a[0] + h[1] * a[1] + wl * a[2]) / ww
        p0 = a[0] - coef * h[0]
        p1 = a[1] - coef * h[1]
        nrm = np.sqrt(p0 * p0 + p1 * p1)
        if nrm <= tol:
            if nrm > stats[0]:
                stats[0] = nrm
            continue
        if nrm < stats[1]:
            stats[1] = nrm
        t = np.arctan2(p1, p0)
        if t < 0.0:
            t += _PI
        if t >= _PI:
            t -= _PI
        ang[m] = t
        m += 1
    if m <= 1:
        return m
    srt = np.sort(ang[:m])
    lines = 1
    for j in range(1, m):
        g = srt[j] - srt[j - 1]
        if g <= tol:
            if g > stats[0]:
                stats[0] = g
        else:
            if g < stats[1]:
                stats[1] = g
            lines += 1
    g = srt[0] + _PI - srt[m - 1]           # the first and last angles are neighbours mod π
    if g <= tol:
        if g > stats[0]:
            stats[0] = g
        lines -= 1
    elif g < stats[1]:
        stats[1] = g
    return max(lines, 1)


@nb.njit(cache=True)
def walk(buf, D0, ang, tol, stats, mm, kk, st, budget):
    """Advance the depth-first traversal that counts the regions of the central arrangement of
    the distinct unit normals ``buf[0, :mm[0], :D0]`` in ``R^D0`` (``D0 >= 3``) by at most
    about ``budget`` units of work, and return the work done.

    The recursion ``r = 1 + Σ_k r(restriction to H_k)`` is run with an explicit stack (numba's
    cache cannot hold recursive functions): level ``l`` holds its normals in ``buf[l]`` and lives
    in ``R^(D0 − l)``; every level with hyperplanes adds its ``1``, and a level in ``R^3`` adds
    the ``2 × lines`` (or 1) of each restriction directly. The whole state lives in the arrays
    passed, so a caller can run the traversal in slices (and handle signals and report progress
    in between): ``mm[l]``, ``kk[l]`` the number of normals of level ``l`` and the next one to
    restrict to; ``st = [depth, total]`` the current level (``−1`` when done) and the regions
    counted so far. Start with ``mm[0] = m0``, ``kk[0] = 0``, ``st = [0, 1]``.

    A unit of work is one hyperplane handled in one restriction (a restriction to ``H_k``
    costs ``k + 1``), so the time of a slice is roughly proportional to its work.
    """
    depth = st[0]
    total = st[1]
    work = 0
    while depth >= 0 and work < budget:
        if kk[depth] == mm[depth]:
            depth -= 1
            continue
        k = kk[depth]
        kk[depth] += 1
        D = D0 - depth
        work += k + 1
        if D == 3:
            lines = _lines_in_plane(buf, depth, k, ang, tol, stats)
            total += 2 * lines if lines > 0 else 1
        else:
            cnt = _restrict(buf, depth, k, D, buf[depth + 1], tol, stats)
            total += 1
            if cnt > 0:
                mm[depth + 1] = cnt
                kk[depth + 1] = 0
                depth += 1
    st[0] = depth
    st[1] = total
    return work


@nb.njit(cache=True)
def _regions(buf, m0, D0, ang, tol, stats):
    """Regions of the central arrangement of the ``m0`` distinct unit normals
    ``buf[0, :m0, :D0]`` in ``R^D0``: :func:`walk` to the end in one call."""
    if m0 == 0:
        return np.int64(1)
    if D0 == 1:
        return np.int64(2)
    if D0 == 2:
        return np.int64(2 * m0)
    mm = np.zeros(D0, dtype=np.int64)
    kk = np.zeros(D0, dtype=np.int64)
    mm[0] = m0
    st = np.array([0, 1], dtype=np.int64)
    while st[0] >= 0:
        walk(buf, D0, ang, tol, stats, mm, kk, st, np.int64(1) << 62)
    return st[1]


@nb.njit(cache=True)
def distinct_normals(normals, buf0, cnt, lo, hi, tol, stats):
    """Add the unit normals of rows ``lo:hi`` of ``normals`` (n, D) to the distinct unit
    normals ``buf0[:cnt]`` (each one unless it coincides with one there, within chord distance
    ``tol`` up to sign); returns the new count. Rows in slices, so a caller can stop between
    them: the cost is ``O((hi − lo) · cnt · D)``."""
    D = normals.shape[1]
    p = np.empty(D)
    for i in range(lo, hi):
        nrm = 0.0
        for c in range(D):
            nrm += normals[i, c] * normals[i, c]
        nrm = np.sqrt(nrm)
        for c in range(D):
            p[c] = normals[i, c] / nrm
        cnt = _add_if_new(p, buf0, cnt, D, tol, stats)
    return cnt


@nb.njit(cache=True)
def region_count(normals, tol):
    """Regions of the central arrangement ``{u : normals[j]·u = 0}``.

    Parameters
    ----------
    normals : ndarray of shape (n, D), float64
        Non-zero normals (not necessarily unit, duplicates allowed).
    tol : float
        Chord tolerance on unit normals up to sign (see the module docstring).

    Returns
    -------
    count : int
    stats : ndarray of shape (2,)
        ``[largest merged distance, smallest kept distance]`` (0 and 4 when no decision).
    n_distinct : int
        Number of distinct hyperplanes.
    """
    n, D = normals.shape
    buf = np.zeros((D + 1, n + 1, D))
    ang = np.empty(n + 1)
    stats = np.array([0.0, 4.0])
    cnt = distinct_normals(normals, buf[0], 0, 0, n, tol, stats)
    return _regions(buf, cnt, D, ang, tol, stats), stats, cnt
