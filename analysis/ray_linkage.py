"""The geometry and the linkage under :func:`analysis.rays.find_rays`: directions and masses of
particles, their activation cells, the minimum spanning forest of the mutual-reachability
k-NN graph, the plateau of the ray count, and the joins of rays split by a data point's cell
boundary (docs/theory.md §6.6). Method: the docstring of :mod:`analysis.rays`."""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial import cKDTree

from analysis.certificate import certificate
from analysis.ternary import ray_pattern, ternary_pattern
from solvers.geometry import lifted


def directions(theta):
    """Directions ``v`` (N, d+1), norms ``|u|`` (N,) and masses ``|a||u|`` (N,) of particles
    ``theta`` (N, d+2)."""
    theta = np.asarray(theta, dtype=np.float64)
    u = theta[:, 1:]
    r = np.linalg.norm(u, axis=1)
    v = u / np.where(r > 0, r, 1.0)[:, None]
    return v, r, np.abs(theta[:, 0]) * r


def pattern_of(v, X, tol):
    """Ternary pattern of direction ``v`` with angular tolerance ``tol`` (radians); see
    :func:`analysis.ternary.ternary_pattern`."""
    return ternary_pattern(v, X, tol)[0]


def weighted_median(values, weights) -> float:
    """The weighted median of ``values`` (the smallest value with at least half the weight
    at or below it)."""
    o = np.argsort(values)
    c = np.cumsum(weights[o])
    return float(values[o][np.searchsorted(c, 0.5 * c[-1])])


def cells(sign, V, X) -> np.ndarray:
    """Cell id of each particle: its sign and binary activation pattern ``1[v·x̃_j > 0]``
    (ids are consecutive integers from 0; equal ids, equal cells).

    Parameters
    ----------
    sign : ndarray of shape (m,)   sign of ``a``
    V : ndarray of shape (m, d+1)  directions
    X : ndarray of shape (n, d)    training inputs
    """
    bits = np.hstack([(np.asarray(sign) > 0)[:, None], np.asarray(V) @ lifted(X).T > 0])
    packed = np.ascontiguousarray(np.packbits(bits, axis=1))
    key = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    return np.unique(key, return_inverse=True)[1].ravel()


#: Kept particles of one sign above which the linkage tree is built on a mass-weighted sample
#: of this many (:func:`_linkage_tree`; docs/theory.md §6.1): the k-nearest-neighbour queries
#: then cost a bounded time whatever ``N`` (measured in ``benchmarks/README.md``).
LINKAGE_MAX_PARTICLES = 20_000
#: Points per k-nearest-neighbour query between two progress reports.
QUERY_CHUNK = 20_000
#: Approximation of the nearest-sampled-particle search (``cKDTree.query(eps=...)``): the
#: sampled particle found is within ``1 + ATTACH_EPS`` times the chord of the nearest (measured
#: in 11 dimensions: 6 times faster than the exact search, the mean chord 0.3 % longer).
ATTACH_EPS = 1.0


def _query(tree, P, k, progress, done, total, eps=0.0):
    """``tree.query(P, k, eps=eps)`` in chunks of :data:`QUERY_CHUNK` points,
    ``progress(done, total)`` after each (``done`` counting from ``done``). Returns
    ``(dist, nb, done)``."""
    dist, nb = [], []
    for lo in range(0, P.shape[0], QUERY_CHUNK):
        d_, n_ = tree.query(P[lo:lo + QUERY_CHUNK], k=k, eps=eps)
        dist.append(np.asarray(d_).reshape(-1, k))
        nb.append(np.asarray(n_).reshape(-1, k))
        done += min(QUERY_CHUNK, P.shape[0] - lo)
        if progress is not None:
            progress(done, total)
    if not dist:
        return np.zeros((0, k)), np.zeros((0, k), dtype=np.int64), done
    return np.concatenate(dist), np.concatenate(nb), done


def mass_sample(mass, m: int, seed: int = 0) -> np.ndarray:
    """Indices of ``m`` of the particles, drawn without replacement with probability
    proportional to ``mass`` (systematic sampling on the cumulative mass, its start fixed by
    ``seed``; a particle heavier than ``1/m`` of the total is always drawn), sorted."""
    M = mass.size
    if m >= M:
        return np.arange(M)
    w = np.maximum(np.asarray(mass, dtype=float), 0.0)
    if not w.sum() > 0:
        w = np.ones(M)
    c = np.cumsum(w)
    u = (np.random.default_rng(seed).random() + np.arange(m)) * (c[-1] / m)
    pick = np.unique(np.minimum(np.searchsorted(c, u, side="right"), M - 1))
    if pick.size < m:          # heavy particles drawn more than once: fill with the heaviest left
        rest = np.setdiff1d(np.arange(M), pick, assume_unique=True)
        top = rest[np.argsort(-w[rest], kind="stable")[: m - pick.size]]
        pick = np.sort(np.concatenate([pick, top]))
    return pick


def _linkage_tree(V, sign, mass, knn, progress=None, max_particles=None, replicas: int = 1):
    """Minimum spanning forest of the mutual-reachability k-NN graph of each sign.

    ``V`` pools ``replicas`` snapshots (:func:`analysis.rays.find_rays`): a particle's core
    distance is then that of one snapshot's density, the distance to its
    ``knn · replicas``-th neighbour, so that a threshold resolves in the pooled cloud what it
    resolves in one snapshot (``knn`` nearest neighbours still give the graph's edges).

    Above ``max_particles`` (default :data:`LINKAGE_MAX_PARTICLES`) kept particles of one sign,
    the k-NN graph is that of a mass-weighted sample of ``max_particles`` of them
    (:func:`mass_sample`), and every other particle hangs from a nearest sampled particle (found
    within ``1 + ATTACH_EPS`` times the nearest chord) by one edge of weight
    ``max(chord, core of that particle)`` (its own core distance is set to that weight). The cluster masses and particle counts computed from the tree are those of
    all particles; what the sample changes is the resolution of directions: a cluster holding a
    fraction ``p`` of the mass has about ``p · max_particles`` sampled particles (200 for a ray
    at the 1 % mass floor), and the core distances are those of the sample, about
    ``(M / max_particles)^(1/k)`` times the full ones for rays of intrinsic dimension ``k``
    (the scanned thresholds start at their median, so the plateau of the count moves with
    them). Rays further apart than a few sampled core distances are found as by the full tree
    (docs/theory.md §6.1; ``tests/analysis/test_rays.py`` checks the counts at 2·10⁵ particles).

    ``progress(done, total)``, if given, is told after each chunk of :data:`QUERY_CHUNK`
    neighbour queries (``total`` = the queries of both signs).

    Returns
    -------
    ei, ej, ew : ndarrays
        Tree edges (indices into the rows of ``V``) and their mutual-reachability chord distance
        ``max(|v_i − v_j|, core_i, core_j)``.
    core_median : float
        Mass-weighted median core distance (distance to the k-th neighbour): the typical
        neighbour spacing inside rays.
    """
    cap = LINKAGE_MAX_PARTICLES if max_particles is None else int(max_particles)
    m_all = V.shape[0]
    rows, cols, wts = [], [], []
    core = np.full(m_all, np.inf)
    total = int(sum(np.count_nonzero(sign == s) for s in (1, -1)
                    if np.count_nonzero(sign == s) >= 2))
    done = 0
    for s in (1, -1):
        idx = np.nonzero(sign == s)[0]
        m = idx.size
        if m < 2:
            continue
        sub = idx if m <= cap else idx[mass_sample(mass[idx], cap)]
        ms = sub.size
        # the core's neighbour: knn of one snapshot, in the pooled (or sampled) cloud
        kc = min(max(knn, int(round(knn * replicas * ms / m))) + 1, ms)
        kk = min(knn + 1, ms)
        tree = cKDTree(V[sub])
        dist, nb, done = _query(tree, V[sub], kc, progress, done, total)
        core[sub] = dist[:, -1]
        dist, nb = dist[:, :kk], nb[:, :kk]
        mr = np.maximum(dist[:, 1:], np.maximum(core[sub][:, None], core[sub][nb[:, 1:]]))
        rows.append(np.repeat(sub, kk - 1))
        cols.append(sub[nb[:, 1:].ravel()])
        wts.append(mr.ravel())
        if ms < m:
            rest = np.setdiff1d(idx, sub, assume_unique=True)
            d1, n1, done = _query(tree, V[rest], 1, progress, done, total, ATTACH_EPS)
            near = sub[n1[:, 0]]
            w = np.maximum(d1[:, 0], core[near])
            core[rest] = w
            rows.append(rest)
            cols.append(near)
            wts.append(w)
    fin = np.isfinite(core)
    core_median = weighted_median(core[fin], mass[fin]) if fin.any() else float("nan")
    if not rows:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0), core_median
    w = np.maximum(np.concatenate(wts), 1e-300)     # zero weights would read as "no edge"
    g = coo_matrix((w, (np.concatenate(rows), np.concatenate(cols))),
                   shape=(m_all, m_all)).tocsr()
    T = minimum_spanning_tree(g).tocoo()
    return T.row, T.col, T.data, core_median


def _cell_conflicts(ray_of, cell, mass, J, frac):
    """Pairs ``[k, l]`` of rays that each hold at least ``frac`` of their mass in one common
    cell (same sign and binary pattern)."""
    if J < 2:
        return []
    sel = ray_of >= 0
    C = int(cell.max()) + 1
    M = np.zeros((J, C))
    np.add.at(M, (ray_of[sel], cell[sel]), mass[sel])
    M /= np.maximum(M.sum(axis=1, keepdims=True), 1e-300)
    big = M >= frac
    out = []
    for k in range(J):
        for l in range(k + 1, J):
            if np.any(big[k] & big[l]):
                out.append([k, l])
    return out


def _widest_plateau(counts):
    """Index range ``(i, j)`` of the longest run of equal non-zero counts (first if tied)."""
    best = (0, 0)
    found = False
    i = 0
    L = len(counts)
    while i < L:
        j = i
        while j + 1 < L and counts[j + 1] == counts[i]:
            j += 1
        if counts[i] > 0 and (not found or (j - i) > (best[1] - best[0])):
            best = (i, j)
            found = True
        i = j + 1
    return best


def _near_boundaries(v, spread, L, angle_tol, absorb):
    """Per data point ``j``: the angle (radians) from unit direction ``v`` to the hyperplane
    ``{u : u·x̃_j = 0}`` is at most ``max(absorb·spread, angle_tol)``."""
    z = np.abs(L @ v) / np.linalg.norm(L, axis=1)
    return np.arcsin(np.clip(z, 0.0, 1.0)) <= max(absorb * spread, angle_tol)


def _summary(members, V, mass):
    """Mass-weighted mean direction and RMS angle of a set of particles."""
    mm = mass[members]
    vbar = mm @ V[members]
    vbar /= np.linalg.norm(vbar)
    ang = np.arccos(np.clip(V[members] @ vbar, -1.0, 1.0))
    return vbar, float(np.sqrt(np.sum(mm * ang ** 2) / mm.sum()))


#: Points on the great-circle arc between two rays at which :func:`_no_valley` evaluates the
#: certificate gap.
ARC_POINTS = 33


def _no_valley(va, vb, angle, sign, gap_of) -> bool:
    """No valley of ``−sign(a) G`` on the great-circle arc from ``va`` to ``vb``: the gap
    ``gap_of`` at every point of the arc (:data:`ARC_POINTS`) is at most the larger of its
    values at the ends, so both directions sit on one maximum of ``|G|``."""
    if angle <= 0:
        return True
    s = np.linspace(0.0, 1.0, ARC_POINTS)[:, None]
    arc = (np.sin((1 - s) * angle) * va + np.sin(s * angle) * vb) / np.sin(angle)
    g = gap_of(arc, sign)
    return bool(np.max(g[1:-1], initial=-np.inf) <= max(g[0], g[-1]) + 1e-12)


def _merge_across_data_points(labels, signs, V, mass, X, ptol, max_spread, absorb,
                              gap_of=None, cell=None):
    """Join rays of one sign that are one ray: fragments of one direction, or one ray split by
    a data point's cell boundary (docs/theory.md §6.1, §6.6).

    Rays ``k`` and ``l`` of one sign are joined when the union is compact (RMS angle at most
    ``max_spread``) and either

    - **fragments of one maximum of** ``|G|``: with ``gap_of`` (the certificate gap
      ``1 + sign(a) G(v)`` of directions (m, d+1), and the sign), their directions are at most
      ``max_spread`` apart and no valley of ``−sign(a) G`` lies on the arc between them
      (:func:`_no_valley`), so they sit on one maximum, and rays are the maxima (THEORY §4).
      Without ``gap_of``: they share an
      activation cell (each holds at least ``mass_tol`` of its mass in one binary cell) or
      have one ternary pattern, and their directions are within ``absorb`` times the larger
      of their RMS spreads and ``angle_tol`` (a ray's own width; ``angle_tol`` for rays of one
      particle), since in the ``τ → 0`` limit a sign and a cell hold at most one direction
      (two would be merged at a lower cost and the same predictor). The exact law at low
      ``τ`` puts a ray's weight on few particles, which the linkage leaves apart; two
      directions of one cell that are not fragments are kept and reported as a cell
      conflict;
    - **split at data points**: their patterns differ, and only at data points ``j`` where
      the pattern of the union is 0 (its kink passes within the pattern tolerance of ``x_j``:
      within ``angle_tol``, or the union straddles ``x̃_j``'s hyperplane with at least
      ``mass_tol`` on the lighter side), and each of the two lies within ``absorb`` times its
      own RMS spread of that hyperplane (the radius within which a particle joins a ray: it
      touches the boundary).

    The nearest qualifying pair is joined first, repeatedly, until no pair qualifies.
    ``cell``: the particles' cell ids (:func:`cells`), when the caller has them.

    Returns
    -------
    labels : ndarray of shape (N,) int
        Ray of each particle after the joins (consecutive from 0, −1 for the halo).
    signs : list of int
        Sign of each ray.
    merged : list of dict
        ``{"ray", "parts", "data_points"}`` per joined ray (indices after the joins;
        ``data_points``: where the joined parts' patterns differ and the union's kink is).
    """
    L = lifted(X)
    if cell is None:
        cell = cells(np.ones(len(V)), V, X)
    groups = {k: ([k], []) for k in range(len(signs))}
    labels = labels.copy()
    changed = True
    while changed:
        changed = False
        keys = sorted(groups)
        info = {}
        for k in keys:
            mem = np.nonzero(labels == k)[0]
            vbar, sp = _summary(mem, V, mass)
            share = np.bincount(cell[mem], weights=mass[mem], minlength=int(cell.max()) + 1)
            info[k] = (mem, vbar, sp, ray_pattern(vbar, V[mem], mass[mem], X, ptol)[0],
                       share >= ptol.mass_tol * share.sum())
        pairs = sorted((float(np.arccos(np.clip(info[a][1] @ info[b][1], -1.0, 1.0))), a, b)
                       for a in keys for b in keys if b > a and signs[a] == signs[b])
        for ang, a, b in pairs:                          # the nearest pair first
            ma, va, sa, ta, ca = info[a]
            mb, vb, sb, tb, cb = info[b]
            D = np.nonzero(ta != tb)[0]
            if gap_of is not None:
                fragments = ang <= max_spread and _no_valley(va, vb, ang, signs[a], gap_of)
            else:
                fragments = ((D.size == 0 or np.any(ca & cb))
                             and ang <= absorb * max(sa, sb, ptol.angle_tol))
            if not fragments and not (
                    D.size and np.all(_near_boundaries(va, sa, L[D], ptol.angle_tol, absorb))
                    and np.all(_near_boundaries(vb, sb, L[D], ptol.angle_tol, absorb))):
                continue
            mu = np.concatenate([ma, mb])
            vu, su = _summary(mu, V, mass)
            if su > max_spread:
                continue
            tu = ray_pattern(vu, V[mu], mass[mu], X, ptol)[0]
            if not fragments and np.any(tu[D] != 0):
                continue
            D = D[tu[D] == 0]
            labels[labels == b] = a
            groups[a] = (groups[a][0] + groups[b][0], sorted(set(groups[a][1]) | set(D.tolist())))
            del groups[b]
            changed = True
            break
    keys = sorted(groups)
    new = -np.ones(len(signs) + 1, dtype=int)
    new[keys] = np.arange(len(keys))
    labels = np.where(labels >= 0, new[labels], -1)
    merged = [{"ray": i, "parts": len(groups[k][0]), "data_points": [int(j) for j in groups[k][1]]}
              for i, k in enumerate(keys) if len(groups[k][0]) > 1]
    return labels, [signs[k] for k in keys], merged


#: Smallest share of the pooled mass ``Σ|a||u|`` of an activation cell that :func:`cell_classes`
#: considers for a join (the floor of a ray's weight, ``find_rays(min_mass_frac=...)``).
CELL_JOIN_MIN_SHARE = 1e-2


def cell_classes(theta, X, ptol, max_spread: float = 0.3, absorb: float = 3.0,
                 min_share: float = CELL_JOIN_MIN_SHARE) -> np.ndarray:
    """Activation cells of particles ``theta`` (N, d+2), with the cells of one sign that hold
    one ray split by a data point's cell boundary joined (docs/theory.md §6.6).

    Every cell (sign of ``a`` and binary pattern, :func:`cells`) holding at least
    ``min_share`` of the total mass ``Σ|a||u|`` is a candidate, and candidates are joined by
    the rule of :func:`_merge_across_data_points` (``ptol``, ``max_spread``, ``absorb``, as
    :func:`analysis.rays.find_rays` joins rays): a ray whose kink passes through ``x_j`` has
    particles on both sides of ``x̃_j``'s hyperplane, and the two cells are one class. Lighter
    cells stay classes of their own.

    Returns
    -------
    ndarray of shape (N,) int
        Class of each particle (equal ids, one class; ids are not consecutive).
    """
    theta = np.asarray(theta, dtype=np.float64)
    V, _, mass = directions(theta)
    sign = np.where(theta[:, 0] > 0, 1, -1)
    cid = cells(sign, V, X)
    C = int(cid.max()) + 1 if cid.size else 0
    cm = np.bincount(cid, weights=mass, minlength=C)
    cand = np.nonzero(cm >= min_share * cm.sum())[0] if cm.sum() > 0 else np.zeros(0, int)
    label_of_cell = -np.ones(C, dtype=int)
    label_of_cell[cand] = np.arange(len(cand))
    labels = label_of_cell[cid]
    if len(cand) > 1:
        signs = [int(sign[np.argmax(cid == c)]) for c in cand]
        labels, _, _ = _merge_across_data_points(labels, signs, V, mass, X, ptol, max_spread,
                                                 absorb, cell=cid)
    return np.where(labels >= 0, labels, len(cand) + cid)


def _split_by_basins(labels, signs, V, mass, X, R, lam, floor_mass):
    """Split a ray whose particles gather at two or more local maxima of ``−sign(a) G_R``
    (:mod:`analysis.certificate_maxima`) separated by a valley of the certificate: two
    concentrations with a valley between them are two rays, whatever their angle
    (docs/theory.md §6.7).

    Each particle goes to the nearest maximum of its sign. A part counts when its particles
    hold at least ``floor_mass`` of the mass, its mass-weighted mean direction is nearer its
    own maximum than any other part's (a smear over a shallow saddle has its means between the
    maxima), and a valley of ``−sign(a) G`` lies on the arc between its maximum and every
    other part's (:func:`_no_valley`); particles of the other maxima join the part whose
    maximum is nearest. Skipped (nothing split) when the data have more activation cells than
    the enumeration takes.

    Returns
    -------
    labels : ndarray of shape (N,) int
    signs : list of int
    split : list of dict
        ``{"ray", "parts", "directions", "masses"}`` per split ray (indices before the split
        for ``ray``; ``parts``: the new ray indices, the first the old one).
    """
    from analysis.certificate_maxima import cell_maxima_of, maxima_of, nearest_maximum
    from solvers.activation_regions import TooManyPatterns
    try:
        asc = cell_maxima_of(R, X, lam)
    except TooManyPatterns:
        return labels, list(signs), []
    maxima = maxima_of(asc)
    labels, signs, split = labels.copy(), list(signs), []
    if len(maxima) < 2:
        return labels, signs, split
    for k in range(len(signs)):
        mem = np.nonzero(labels == k)[0]
        if mem.size < 2:
            continue
        b = nearest_maximum(maxima, V[mem], -signs[k])
        mm = mass[mem]
        heavy = [int(i) for i in np.unique(b[b >= 0]) if mm[b == i].sum() >= floor_mass]
        if len(heavy) < 2:
            continue
        Vm = np.array([maxima[i][0] for i in heavy])
        means = np.array([_summary(mem[b == i], V, mass)[0] for i in heavy])
        own = np.argmax(means @ Vm.T, axis=1)
        if not np.array_equal(own, np.arange(len(heavy))):
            continue
        # the parts must be separated by a valley of −sign(a) G (else one maximum's smear)
        def gap_of(arc, sign):
            return 1.0 + sign * certificate(arc, X, R, lam)
        keep = [0]
        for p in range(1, len(heavy)):
            if all(not _no_valley(Vm[p], Vm[q], float(np.arccos(np.clip(Vm[p] @ Vm[q], -1, 1))),
                                  signs[k], gap_of) for q in keep):
                keep.append(p)
        if len(keep) < 2:
            continue
        heavy, Vm = [heavy[p] for p in keep], Vm[keep]
        part = np.array([heavy.index(i) if i in heavy else -1 for i in b])
        loose = part < 0
        part[loose] = np.argmax(V[mem[loose]] @ Vm.T, axis=1)
        new = [k] + list(range(len(signs), len(signs) + len(heavy) - 1))
        labels[mem] = np.array(new)[part]
        signs += [signs[k]] * (len(heavy) - 1)
        split.append({"ray": int(k), "parts": [int(x) for x in new],
                      "directions": [[float(x) for x in v] for v in Vm],
                      "masses": [float(mm[part == p].sum()) for p in range(len(heavy))]})
    return labels, signs, split
