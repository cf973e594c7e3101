"""Ray counts checked against the ``τ → 0`` reference and against their own thresholds.

- :func:`residual_window`: the stage's scaled-residual observations ending at a snapshot, whose
  time average the certificate ``G`` of a ray is computed from (not one snapshot's residuals)
  and whose autocorrelation gives its standard error;
- :func:`convex_counts`: the convex reference's rays with weight at least a floor (the same
  fraction of ``Σ|c_k|`` as the particle mass floor of a ray) and their kink hyperplanes, by
  the same rule as the particles' (:func:`analysis.kinks.data_kinks`);
- :func:`convex_comparison`: a snapshot's rays matched one to one to those reference rays;
- :func:`sensitivity`: ``J`` and ``K`` of one snapshot over a range of each threshold, one
  threshold at a time, and the convex counts over a range of the floor.
"""

from __future__ import annotations

import numpy as np

#: Factors applied to each threshold in :func:`sensitivity` (the default sits in the middle).
SCALES = (1 / 3, 1.0, 3.0)


def residual_window(run, k: int, window: float = 0.5) -> np.ndarray:
    """Scaled-residual observations ``R_j = (f(x_j) − y_j)/n`` of frame ``k``'s stage in the
    last ``window`` fraction of the stage up to the frame's step (of the whole stage up to it
    when none falls there); their mean is the time-averaged ``R`` of the frame's rays.

    Parameters
    ----------
    run : meanfield.store.Run
    k : int
        Snapshot frame.
    window : float
        Fraction of the stage.

    Returns
    -------
    ndarray of shape (M, n), or None when the run has no residual observations there.
    """
    sch = run.schedule
    step = int(run.frame_step[k])
    stage = int(run.frame_stage[k])
    start = sch.stage_bounds(stage)[0]
    lo = sch.last_part(stage, window)[0]
    obs = run.observables.get("residuals")
    if obs is None or len(obs["step"]) == 0:
        return None
    sel = (obs["step"] > lo) & (obs["step"] <= step)
    if not np.any(sel):
        sel = (obs["step"] > start) & (obs["step"] <= step)
    if not np.any(sel):
        return None
    return np.asarray(obs["value"][sel], dtype=float)


def convex_counts(conv, X, floor: float = 1e-2, **kink_kw) -> dict:
    """Rays of the convex reference with ``|c_k| ≥ floor·Σ|c|`` and their kink hyperplanes.

    Parameters
    ----------
    conv : solvers.convex.ConvexSolution
    X : ndarray of shape (n, d)
    floor : float
        Weight floor, a fraction of ``Σ_k |c_k|`` (the analogue of a particle ray's mass
        fraction ``Σ|a||u|`` over the total, which tends to ``|c_k|/Σ|c|`` as ``τ → 0``).
    **kink_kw
        Passed to :func:`analysis.kinks.data_kinks`.

    Returns
    -------
    dict
        ``J``, ``K``, ``floor``, ``index`` (kept rays, indices into ``conv``), ``directions``,
        ``signs``, ``weights`` (of the kept rays), ``kinks`` (list of Kink, ray indices into the
        kept rays).

    Raises
    ------
    ValueError
        ``X`` not of shape (n, d) with ``d + 1`` the length of the directions.
    """
    from analysis.kinks import data_kinks
    w = np.asarray(conv.weights, dtype=float)
    tot = float(np.abs(w).sum())
    keep = np.nonzero(np.abs(w) >= floor * tot)[0] if tot > 0 else np.zeros(0, int)
    dirs = np.asarray(conv.directions, dtype=float)[keep]
    kinks = data_kinks(dirs, X, **kink_kw) if keep.size else []
    return {"J": int(keep.size), "K": len(kinks), "floor": float(floor),
            "index": [int(i) for i in keep], "directions": dirs,
            "signs": np.sign(w[keep]).astype(int), "weights": w[keep], "kinks": kinks}


def convex_comparison(rays, cc: dict, max_angle: float = 0.2) -> dict:
    """Match measured rays to the convex rays kept by :func:`convex_counts`.

    Returns
    -------
    dict
        :func:`analysis.references.match_rays`'s result (``pairs``, ``unmatched_measured``,
        ``unmatched_reference``, ``max_angle``, ``max_weight_error``).
    """
    from analysis.references import match_rays
    return match_rays([q.direction for q in rays], [q.sign for q in rays],
                      [q.weight for q in rays], cc["directions"], cc["signs"], cc["weights"],
                      max_angle=max_angle)


def _count(theta, X, ray_kw, kink_kw):
    from analysis.kinks import ray_kinks
    from analysis.rays import find_rays
    res = find_rays(theta, X, **ray_kw)
    K = len(ray_kinks(res.rays, X, res.pattern_tol.angle_tol, **kink_kw))
    return len(res.rays), K, res


def sensitivity(theta, X, ray_kw: dict, kink_kw: dict | None = None, conv=None,
                floor: float = 1e-2, scales=SCALES) -> dict:
    """``J`` and ``K`` of one snapshot over a range of each threshold (the others at their
    values in ``ray_kw``), and the convex counts over the same range of the weight floor.

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
    X : ndarray of shape (n, d)
    ray_kw : dict
        Keyword arguments of :func:`analysis.rays.find_rays` for the snapshot (``y``, ``lam``,
        ``tau``, ``R`` and any thresholds).
    kink_kw : dict, optional
        Keyword arguments of :func:`analysis.kinks.data_kinks`.
    conv : solvers.convex.ConvexSolution, optional
        Adds the rows of the convex weight floor.
    floor : float
        The default floor.
    scales : sequence of float
        Factors applied to each threshold's value.

    Returns
    -------
    dict
        ``{"rows": [{"threshold", "value", "J", "K"}], "default": {"J", "K"},
        "robust": bool}``; thresholds: ``min_mass_frac``, ``halo_ratio`` and
        ``particle_halo`` (with ``tau``),
        ``g_ray`` (with ``G``; levels 0, the value and (1+value)/2), ``min_particles``,
        ``max_spread`` (the linkage rule's),
        ``linkage_chord`` (the linkage rule's chosen threshold times each scale), ``rel_tol`` (the
        kink tolerance), ``pattern_angle_tol`` and ``pattern_mass_tol`` (the tolerances of a
        pattern's 0 entries, which also decide the joins across data points and the kink
        identity), ``thermal_gap`` (the constant of the certificate-gap test, with ``tau``
        and a weight scale), ``convex_floor``. ``robust``: every row gives the default ``J`` and
        ``K``.

    Raises
    ------
    ValueError
        As :func:`analysis.rays.find_rays` (shapes, ``R``/``y``/``tau`` without ``lam``).
    """
    from analysis.kinks import KINK_REL_TOL, ray_kinks
    from analysis.rays import THERMAL_GAP
    from analysis.ternary import PatternTolerance
    kink_kw = dict(kink_kw or {})
    J0, K0, res0 = _count(theta, X, ray_kw, kink_kw)
    rows = []

    def add(name, value, J, K):
        rows.append({"threshold": name, "value": float(value), "J": int(J), "K": int(K)})

    defaults = {"min_mass_frac": ray_kw.get("min_mass_frac", 1e-2)}
    if ray_kw.get("tau") is not None:
        defaults["halo_ratio"] = ray_kw.get("halo_ratio", 3.0)
        defaults["particle_halo"] = ray_kw.get("particle_halo", 1.0)
    # per snapshot (find_rays scales it by the snapshots pooled, ``replicas``)
    F = res0.replicas
    defaults["min_particles"] = (res0.min_particles if F == 1 else
                                 1 if res0.min_particles <= -(-F // 2) else
                                 res0.min_particles // F)
    if res0.rule != "basins":        # the basins rule has no compactness test (§6.1)
        defaults["max_spread"] = ray_kw.get("max_spread", 0.3)
    for name, v0 in defaults.items():
        seen = set()
        for sc in scales:
            v = v0 * sc
            if name == "min_particles":
                v = max(1, round(v))
                if v in seen:           # 1/3 and 1 of a default 1 are one row, not two
                    continue
                seen.add(v)
            J, K, _ = _count(theta, X, {**ray_kw, name: v}, kink_kw)
            add(name, v, J, K)
    if res0.g_ray is not None:
        g0 = res0.g_ray
        for g in (0.0, g0, 0.5 * (1 + g0)):
            J, K, _ = _count(theta, X, {**ray_kw, "g_ray": g}, kink_kw)
            add("g_ray", g, J, K)
    if np.isfinite(res0.threshold):
        for sc in scales:
            t = res0.threshold * sc
            J, K, _ = _count(theta, X, {**ray_kw, "thresholds": [t]}, kink_kw)
            add("linkage_chord", t, J, K)
    r0 = kink_kw.get("rel_tol", KINK_REL_TOL)
    for sc in scales:
        K = len(ray_kinks(res0.rays, X, res0.pattern_tol.angle_tol,
                          **{**kink_kw, "rel_tol": r0 * sc}))
        add("rel_tol", r0 * sc, J0, K)
    a0, m0 = res0.pattern_tol.angle_tol, res0.pattern_tol.mass_tol
    for sc in scales:
        J, K, _ = _count(theta, X, {**ray_kw, "pattern_tol": PatternTolerance(a0 * sc, m0)},
                         kink_kw)
        add("pattern_angle_tol", a0 * sc, J, K)
    for sc in scales:
        J, K, _ = _count(theta, X, {**ray_kw, "pattern_tol": PatternTolerance(a0, m0 * sc)},
                         kink_kw)
        add("pattern_mass_tol", m0 * sc, J, K)
    if res0.gap_threshold is not None:
        k0 = ray_kw.get("thermal_gap", THERMAL_GAP)
        for sc in scales:
            J, K, _ = _count(theta, X, {**ray_kw, "thermal_gap": k0 * sc}, kink_kw)
            add("thermal_gap", k0 * sc, J, K)
    if conv is not None:
        for sc in scales:
            cc = convex_counts(conv, X, floor * sc, **kink_kw)
            add("convex_floor", floor * sc, cc["J"], cc["K"])
    plain = [r for r in rows if r["threshold"] != "convex_floor"]
    robust = all(r["J"] == J0 and r["K"] == K0 for r in plain)
    return {"rows": rows, "default": {"J": J0, "K": K0}, "robust": bool(robust)}
