"""Particle runs against the exact references (THEORY §4–5).

- :func:`gibbs_distance`: time-averaged particle predictor on the training inputs against the
  Gibbs fixed point at the stage's temperature (quadrature for ``d ≤ 2``, randomized QMC to
  ``QMC_RTOL`` for ``3 ≤ d ≤ QMC_MAX_D``; skipped with the reason beyond, or where that
  accuracy is out of reach);
- :func:`convex_distance`: the same against the ``τ → 0`` convex reference (meaningful at the
  lowest temperature of a ladder);
- :func:`match_rays`: one-to-one matching of measured rays to reference rays by angle, within a
  sign, on plain arrays (directions, signs, weights) so it works with any ray finder.

References are cached per (data, ``lam``, ``tau``) for the life of the process, and on disk
across processes (:mod:`analysis.refcache`, keyed by a hash of every input and of the solver
code). A solution read from the disk cache carries its numbers (``f_train``, ``R``,
``max_abs_G``, ``residual``, ``quad_error``, the convex rays, ...) but not the Gibbs solver's
quadrature rule: for ``GibbsSolution.G``, ``density`` or ``predict`` solve afresh with
:func:`solvers.gibbs.gibbs`.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from analysis import refcache
from analysis.protocols import RunLike
from analysis.time_average import MIN_TAU_SAMPLES, pooled_predictor, time_average_predictor
from solvers.convex import ConvexSolverError, convex
from solvers.gibbs import GibbsConvergenceError, gibbs
from solvers.gibbsqmc import GibbsAccuracyError, QMCGibbsReference, gibbs_qmc
from solvers.reference_methods import choose

_CACHE: dict = {}

#: Requested standard error of the QMC Gibbs reference (relative to max|f|) in ``analyze``:
#: a tenth of the typical MCSE of a time-averaged particle predictor.
QMC_RTOL = 1e-3
#: Largest input dimension for which ``analyze`` computes the Gibbs reference (the QMC cost
#: grows quickly with ``d``; docs/theory.md).
QMC_MAX_D = 5


def _key(X, y, lam, tau):
    return (X.tobytes(), y.tobytes(), float(lam), None if tau is None else float(tau))


def _cached(solver, X, y, lam, taus, options, compute) -> list:
    """``compute()`` through the disk cache (:mod:`analysis.refcache`): the results of the
    ReLU reference ``solver`` on ``(X, y)`` with ``lam``, the temperatures ``taus`` in the
    order solved, and ``options``."""
    return refcache.cached(solver, {"X": X, "y": y},
                           {"lam": float(lam), "taus": [float(t) for t in taus],
                            "options": options, "activation": "relu"}, compute)


def gibbs_reference(X, y, lam, tau):
    """Cached :class:`solvers.gibbs.GibbsSolution` at one temperature: quadrature for
    ``d ≤ 2``, randomized QMC (:mod:`solvers.gibbsqmc`, to ``QMC_RTOL``) above
    (:func:`solvers.reference_methods.choose`).

    Raises
    ------
    solvers.gibbs.GibbsConvergenceError, solvers.gibbsqmc.GibbsAccuracyError
    """
    X, y = np.ascontiguousarray(X, float), np.ascontiguousarray(y, float)
    k = _key(X, y, lam, tau)
    if k not in _CACHE:
        if choose(np.shape(X)[1]) == "quadrature":
            _CACHE[k] = _cached("gibbs", X, y, lam, [float(tau)], {},
                                lambda: [gibbs(X, y, lam, float(tau))])[0]
        else:
            _CACHE[k] = _cached("gibbs_qmc", X, y, lam, [float(tau)], {"rtol": QMC_RTOL},
                                lambda: [gibbs_qmc(X, y, lam, float(tau), rtol=QMC_RTOL)])[0]
    if isinstance(_CACHE[k], Exception):
        raise _CACHE[k]
    return _CACHE[k]


def convex_reference(X, y, lam):
    """Cached :class:`solvers.convex.ConvexSolution`."""
    X, y = np.ascontiguousarray(X, float), np.ascontiguousarray(y, float)
    k = _key(X, y, lam, None)
    if k not in _CACHE:
        _CACHE[k] = _cached("convex", X, y, lam, [], {}, lambda: [convex(X, y, lam)])[0]
    return _CACHE[k]


def _particles(run, stage, window):
    return time_average_predictor(run, stage, window)


def _distances(f, se, ref):
    diff = np.asarray(f) - np.asarray(ref)
    return {"max_abs_diff": float(np.max(np.abs(diff))),
            "rms_diff": float(np.sqrt(np.mean(diff ** 2))),
            "max_stderr": float(np.max(se)),
            "f_particles": [float(v) for v in f], "f_reference": [float(v) for v in ref]}


#: A Gibbs comparison is "consistent" when every training point's distance lies within this many
#: combined errors, with no allowance (docs/theory.md §2.4).
Z_CONSISTENT = 3.0

#: The verdicts of a comparison with the Gibbs reference (:func:`gibbs_allowance`,
#: docs/theory.md §2.4): the one place these words are written; the command line, report.md
#: and report.json take them from here.
#:
#: - :data:`VERDICT_CONSISTENT`: every point within ``Z_CONSISTENT`` combined errors, no
#:   allowance;
#: - :data:`VERDICT_WITHIN_STEP_BIAS`: not so, but within them once the step-bias bound is
#:   allowed for; the bound is not measured, so this tests nothing;
#: - :data:`VERDICT_INCONSISTENT`: beyond both (with the exact sampler, ``"mala"``, the line
#:   names the ``O(1/N)`` width bias, :data:`WIDTH_BIAS_NOTE`);
#: - :data:`VERDICT_TOO_FEW`: no MCSE to measure the distance with (fewer than
#:   ``analysis.time_average.MIN_TAU_SAMPLES`` observations per chain in the window, or an
#:   MCSE zero or not finite at a point).
VERDICT_CONSISTENT = "consistent"
VERDICT_WITHIN_STEP_BIAS = "within the step-bias bound (not a test)"
VERDICT_INCONSISTENT = "inconsistent"
VERDICT_TOO_FEW = "too few observations"
VERDICTS = (VERDICT_CONSISTENT, VERDICT_WITHIN_STEP_BIAS, VERDICT_INCONSISTENT, VERDICT_TOO_FEW)
#: What an inconsistent comparison of the exact sampler may be (docs/theory.md §2.3).
WIDTH_BIAS_NOTE = "possibly the O(1/N) width bias of the N-particle law"


def step_bias_allowance(integrator: str, eta: float, lam: float, d: int, f_reference) -> float:
    """The step's bias allowance of a time-averaged predictor against the Gibbs reference
    (docs/theory.md §2.4): ``b_η = (d+3)(ηλ/2) max_j |f_ref(x_j)|`` for Euler–Maruyama, and for
    Leimkuhler–Matthews (whose measured bias exponent on ReLU data is about 1, docs/theory.md
    §2.1, so Euler's bound is kept); ``0`` for ``"mala"``, which samples the N-particle Gibbs
    measure without step bias.

    Parameters
    ----------
    integrator : {"em", "lm", "mala"}
    eta, lam : float
        Step and weight decay.
    d : int
        Input dimension.
    f_reference : array_like of shape (n,)
        The Gibbs reference predictor on the training points.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        An unknown integrator.
    """
    if integrator == "mala":
        return 0.0
    if integrator not in ("em", "lm"):
        raise ValueError(f"unknown integrator {integrator!r}; one of em, lm, mala")
    return float((d + 3) * (eta * lam / 2) * np.max(np.abs(np.asarray(f_reference, float))))


def gibbs_allowance(diff, stderr, quad_error: float, step_bias: float, *, exact: bool = False,
                    n_observations: int | None = None) -> dict:
    """The allowance of a comparison with the Gibbs reference and its verdict
    (docs/theory.md §2.4).

    Per training point the combined error is ``e_j = sqrt(MCSE_j² + quad_error²)``; the
    comparison is

    - :data:`VERDICT_TOO_FEW` when the MCSE is no estimate: fewer than
      :data:`analysis.time_average.MIN_TAU_SAMPLES` observations per chain
      (``n_observations``), or an MCSE zero or not finite at some point (``z`` is then
      ``nan``);
    - :data:`VERDICT_CONSISTENT` when ``max_j |diff_j| / e_j ≤`` :data:`Z_CONSISTENT` (no
      allowance);
    - :data:`VERDICT_WITHIN_STEP_BIAS` when only the step-bias allowance ``b`` brings it
      there, ``max_j (|diff_j| − b)₊ / e_j ≤ Z_CONSISTENT``: ``b`` is a bound, not a measured
      bias, so this is not a test;
    - :data:`VERDICT_INCONSISTENT` otherwise.

    Parameters
    ----------
    diff : array_like of shape (n,)
        Particle predictor minus the reference on the training points.
    stderr : array_like of shape (n,)
        Monte Carlo standard errors of the particle predictor.
    quad_error : float
        The reference's own error (quadrature or QMC).
    step_bias : float
        :func:`step_bias_allowance` (``0`` for the exact sampler).
    exact : bool
        The particles sample the N-particle law without step bias (``integrator = "mala"``):
        what is left of an inconsistent difference may be the ``O(1/N)`` width bias
        (:func:`verdict_text`).
    n_observations : int, optional
        Observations per chain behind the MCSE (not checked when not given).

    Returns
    -------
    dict
        ``combined_error`` (the largest ``e_j``), ``step_bias_allowance``, ``z`` (the largest
        ``(|diff_j| − b)₊ / e_j``, with the allowance), ``z_without_allowance`` (the largest
        ``|diff_j| / e_j``, what the verdict tests), ``verdict`` (one of :data:`VERDICTS`),
        ``exact_sampler`` and ``n_observations``.

    Raises
    ------
    ValueError
        ``diff`` and ``stderr`` of different shapes.
    """
    diff, se = np.asarray(diff, float), np.asarray(stderr, float)
    if diff.shape != se.shape:
        raise ValueError(f"diff of shape {diff.shape}, stderr of shape {se.shape}")
    e = np.sqrt(se ** 2 + float(quad_error) ** 2)
    too_few = ((n_observations is not None and int(n_observations) < MIN_TAU_SAMPLES)
               or not bool(np.all(np.isfinite(se) & (se > 0))))
    if too_few:
        z = z0 = math.nan
        verdict = VERDICT_TOO_FEW
    else:                       # e_j >= MCSE_j > 0
        z = float(np.max(np.maximum(np.abs(diff) - step_bias, 0.0) / e)) if e.size else 0.0
        z0 = float(np.max(np.abs(diff) / e)) if e.size else 0.0
        verdict = (VERDICT_CONSISTENT if z0 <= Z_CONSISTENT else
                   VERDICT_WITHIN_STEP_BIAS if z <= Z_CONSISTENT else VERDICT_INCONSISTENT)
    return {"combined_error": float(np.max(e)) if e.size else 0.0,
            "step_bias_allowance": float(step_bias), "z": z, "z_without_allowance": z0,
            "verdict": verdict, "exact_sampler": bool(exact),
            "n_observations": None if n_observations is None else int(n_observations)}


def gibbs_distance(run: RunLike, stage: int, window: float = 0.5) -> dict:
    """Distance of the time-averaged particle predictor to the Gibbs reference.

    Parameters
    ----------
    run : meanfield.store.Run
    stage : int
        Ladder index (temperature ``taus[stage]``, which must be > 0).
    window : float
        Fraction of the stage (its end) averaged over.

    Returns
    -------
    dict
        ``stage, tau, max_abs_diff, rms_diff, max_stderr, f_particles, f_reference,
        combined_error, step_bias_allowance, z, z_without_allowance, verdict, exact_sampler,
        n_observations`` (:func:`gibbs_allowance`; the exact sampler is ``"mala"``, the
        observations are per chain in the window), ``n_particles, width_bias,
        width_bias_implied, z_without_width_bias`` (the ``O(1/N)`` width bias estimated from
        the stage's frames, :mod:`analysis.width_bias`; estimates, not tests),
        ``max_abs_G, residual, quad_error, method, seconds`` (``seconds``: wall time of the
        reference, 0 when cached), or ``{"stage", "tau", "skipped": reason}`` when
        ``d > QMC_MAX_D``, ``tau = 0``
        or the QMC accuracy is out of reach at ``tau``.

    Raises
    ------
    solvers.gibbs.GibbsConvergenceError
        The reference did not converge.
    """
    tau = run.taus[stage]
    t0 = time.perf_counter()      # a duration: immune to a step of the wall clock
    ref, skipped = _gibbs_or_skip(run, tau)
    if skipped:
        return {"stage": int(stage), "tau": tau, "skipped": skipped}
    f, se, _, M = pooled_predictor(run, stage, window)
    bias = step_bias_allowance(run.integrator, run.eta, run.lam, run.d, ref.f_train)
    diff = np.asarray(f) - np.asarray(ref.f_train)
    allow = gibbs_allowance(diff, se, float(ref.quad_error), bias,
                            exact=run.integrator == "mala", n_observations=M)
    out = {"stage": int(stage), "tau": tau, **_distances(f, se, ref.f_train), **allow,
           **_width_bias(run, stage, window, diff, se, float(ref.quad_error), allow),
           "max_abs_G": float(ref.max_abs_G),
           "residual": float(ref.residual), "quad_error": float(ref.quad_error),
           "method": choose(run.d),
           "seconds": round(time.perf_counter() - t0, 3)}
    return out


def _width_bias(run: RunLike, stage: int, window: float, diff, se, quad_error: float,
                allow: dict) -> dict:
    """The width-bias fields of a Gibbs row (docs/theory.md §2.3): ``n_particles``,
    ``width_bias`` (:func:`analysis.width_bias.stage_width_bias`, ``None`` without a frame in
    the window), ``width_bias_implied`` (``N · max_j |diff_j|``: the coefficient the
    difference would have if it were all width bias) and ``z_without_width_bias`` (the largest
    ``|diff_j − B_j/N| / e_j``; ``None`` without an estimate or an MCSE). Estimates, not
    tests."""
    from analysis.width_bias import stage_width_bias
    N = int(run.n_particles)
    wb = stage_width_bias(run, stage, window)
    z = None
    if wb is not None and allow["verdict"] != VERDICT_TOO_FEW:
        e = np.sqrt(np.asarray(se, float) ** 2 + quad_error ** 2)
        z = float(np.max(np.abs(np.asarray(diff) - np.asarray(wb["estimate"])) / e))
    return {"n_particles": N, "width_bias": wb,
            "width_bias_implied": float(N * np.max(np.abs(diff))),
            "z_without_width_bias": z}


#: The fewest particles the suggested second run of ``--extrapolate-n`` gets: below twice this
#: the suggestion doubles ``N`` instead of halving it (the O(1/N) term must dominate in both).
EXTRAPOLATE_MIN_N = 100


def verdict_text(g: dict, run_path: str = "RUN.h5") -> str:
    """The verdict of a Gibbs row (:func:`gibbs_distance`) as the command line and report.md
    write it: the verdict, and after it what it needs said.

    - :data:`VERDICT_TOO_FEW`: how many observations there were and what an MCSE needs;
    - :data:`VERDICT_INCONSISTENT` of the exact sampler: :data:`WIDTH_BIAS_NOTE`, its estimate
      from the particles with the coefficient ``N·max|diff|`` of the difference and ``z`` once
      the estimate is taken off (what is left, where that ``z`` is above
      :data:`Z_CONSISTENT`), else that coefficient alone, and the command that removes it,
      ``meanfield analyze RUN --extrapolate-n B.h5`` with ``B`` the same run at half the
      particles (twice as many below ``2 ·`` :data:`EXTRAPOLATE_MIN_N`);
    - any other: the verdict alone.
    """
    v = g["verdict"]
    if v == VERDICT_TOO_FEW:
        M = g.get("n_observations")
        seen = "" if M is None else f"{M} per chain in the window; "
        return (f"{v} ({seen}an MCSE needs at least {MIN_TAU_SAMPLES} and a nonzero, finite "
                f"value at every point: no z)")
    if v != VERDICT_INCONSISTENT or not g.get("exact_sampler"):
        return v
    N = g.get("n_particles")
    wb = g.get("width_bias")
    implied = g.get("width_bias_implied")
    if wb is not None:
        est = (f"estimated {wb['max_abs']:.1e} = {wb['max_abs_coefficient']:.2g}/N from "
               f"{wb['particles']} particles" + (f", here {implied:.2g}/N" if implied is not None
                                                 else ""))
        zw = g.get("z_without_width_bias")
        if zw is not None:
            est += f"; z {zw:.2g} once it is taken off"
            if zw > Z_CONSISTENT:
                est += (", so the rest is not width bias as estimated (a stage not relaxed, "
                        "heavy particles frozen in direction, the Monte Carlo error)")
        est += ": an estimate, not a test"
    elif implied is not None:
        est = (f"it would be {implied:.2g}/N, against at most 0.095/N measured with the exact "
               f"sampler on plane8 at tau = 1e-3 (docs/theory.md §2.3): a comparison, not a "
               f"test")
    else:
        est = "no estimate"
    if not N:
        half = "another n_particles"
    elif N // 2 >= EXTRAPOLATE_MIN_N:
        half = f"n_particles = {N // 2}"
    else:       # a run of a handful of particles is far from the O(1/N) regime: go larger
        half = f"n_particles = {2 * N}"
    return (f"{v}, {WIDTH_BIAS_NOTE} ({est}); meanfield analyze {run_path} --extrapolate-n "
            f"B.h5 removes it, B the same run at {half}")


def _gibbs_or_skip(run: RunLike, tau: float):
    """``(reference, None)``, or ``(None, reason)`` when ``d > QMC_MAX_D``, ``tau = 0`` or the
    QMC accuracy is out of reach at ``tau`` (a quadrature failure, ``d ≤ 2``, is raised)."""
    if run.d > QMC_MAX_D:
        return None, f"Gibbs reference too costly for d = {run.d} > {QMC_MAX_D} (randomized QMC)"
    if tau <= 0:
        return None, "tau = 0 (see the convex reference)"
    try:
        return gibbs_reference(run.X, run.y, run.lam, tau), None
    except (GibbsAccuracyError, GibbsConvergenceError) as exc:
        if choose(run.d) == "quadrature":
            raise
        return None, f"Gibbs reference (qmc): {exc}"


def extrapolation_distance(run: RunLike, row, f_fine, f_coarse) -> dict:
    """Distances to the Gibbs reference of an extrapolation in the step
    (:class:`analysis.ladders.Extrapolation` ``row``) and of the two runs behind it.

    Parameters
    ----------
    run : meanfield.store.Run
        Either run (they share data, ``λ`` and activation).
    row : analysis.ladders.Extrapolation
    f_fine, f_coarse : ndarray of shape (n,)
        The two runs' time-averaged predictors at ``row.tau``.

    Returns
    -------
    dict
        ``fine, coarse, extrapolated`` (largest distances over the training points),
        ``z`` (the largest ``|extrapolated − f_Gibbs| / sqrt(MCSE² + quad_error²)``) and
        ``quad_error``; or ``{"skipped": reason}`` for a non-ReLU run and where
        :func:`gibbs_distance` skips, or when the reference does not converge.
    """
    from analysis.ladders import z_scores
    act = run.activation
    if act != "relu":
        return {"skipped": f"model.activation = {act!r}: the exact references are for relu"}
    try:
        ref, skipped = _gibbs_or_skip(run, row.tau)
    except GibbsConvergenceError as exc:
        return {"skipped": str(exc)}
    if skipped:
        return {"skipped": skipped}
    fg = np.asarray(ref.f_train)
    err = row.mean - fg
    z = z_scores(err, np.sqrt(row.mcse ** 2 + float(ref.quad_error) ** 2))
    return {"fine": float(np.max(np.abs(f_fine - fg))),
            "coarse": float(np.max(np.abs(f_coarse - fg))),
            "extrapolated": float(np.max(np.abs(err))), "z": float(z.max()),
            "quad_error": float(ref.quad_error)}


def convex_distance(run: RunLike, stage: int | None = None, window: float = 0.5) -> dict:
    """Distance of the time-averaged particle predictor of ``stage`` (default: the coldest) to
    the ``τ → 0`` convex reference.

    Returns
    -------
    dict
        ``stage, tau, max_abs_diff, rms_diff, max_stderr, f_particles, f_reference,
        max_abs_G, duality_gap, n_rays``.
    """
    lam, taus = run.lam, run.taus
    if stage is None:
        stage = run.schedule.coldest_stage()
    f, se = _particles(run, stage, window)
    ref = convex_reference(run.X, run.y, lam)
    return {"stage": int(stage), "tau": taus[stage], **_distances(f, se, ref.f_train),
            "max_abs_G": float(ref.max_abs_G), "duality_gap": float(ref.duality_gap),
            "n_rays": int(len(ref.weights))}


def match_rays(directions, signs, weights, ref_directions, ref_signs, ref_weights,
               max_angle: float = 0.2) -> dict:
    """Match measured rays to reference rays one to one.

    Rays are paired only within one sign, by minimum total angle (Hungarian method,
    ``scipy.optimize.linear_sum_assignment``); a pair further apart than ``max_angle`` radians
    is left unmatched.

    Parameters
    ----------
    directions : array-like of shape (K, d+1)
        Measured unit directions ``v = (w, b)/|(w, b)|``.
    signs : array-like of shape (K,)
        Signs of ``a`` (±1).
    weights : array-like of shape (K,)
        Measured weights ``c_k`` (signed or magnitudes: compared as magnitudes).
    ref_directions, ref_signs, ref_weights
        The same for the reference (shape (L, d+1), (L,), (L,)).
    max_angle : float
        Largest angle (radians) for a match.

    Returns
    -------
    dict
        ``pairs``: list of ``{"measured", "reference", "angle", "weight", "ref_weight",
        "weight_error"}`` (indices into the inputs, weights as magnitudes);
        ``unmatched_measured``, ``unmatched_reference``: index lists;
        ``max_angle``: the largest matched angle (nan when none);
        ``max_weight_error``: largest ``|weight − ref_weight|`` over pairs (nan when none).
    """
    A = np.asarray(directions, dtype=float).reshape(len(signs), -1) if len(signs) else \
        np.zeros((0, 1))
    B = np.asarray(ref_directions, dtype=float).reshape(len(ref_signs), -1) if len(ref_signs) \
        else np.zeros((0, 1))
    sa, sb = np.sign(np.asarray(signs, float)), np.sign(np.asarray(ref_signs, float))
    wa, wb = np.abs(np.asarray(weights, float)), np.abs(np.asarray(ref_weights, float))
    pairs = []
    if len(sa) and len(sb):
        A = A / np.linalg.norm(A, axis=1, keepdims=True)
        B = B / np.linalg.norm(B, axis=1, keepdims=True)
        ang = np.arccos(np.clip(A @ B.T, -1.0, 1.0))
        big = 1e6
        cost = np.where(sa[:, None] == sb[None, :], ang, big)
        cost = np.where(cost <= max_angle, cost, big)
        ri, ci = linear_sum_assignment(cost)
        for i, j in zip(ri, ci):
            if cost[i, j] < big:
                pairs.append({"measured": int(i), "reference": int(j),
                              "angle": float(ang[i, j]), "weight": float(wa[i]),
                              "ref_weight": float(wb[j]),
                              "weight_error": float(abs(wa[i] - wb[j]))})
    mi = {p["measured"] for p in pairs}
    rj = {p["reference"] for p in pairs}
    return {"pairs": pairs,
            "unmatched_measured": [i for i in range(len(sa)) if i not in mi],
            "unmatched_reference": [j for j in range(len(sb)) if j not in rj],
            "max_angle": max((p["angle"] for p in pairs), default=math.nan),
            "max_weight_error": max((p["weight_error"] for p in pairs), default=math.nan)}


def compare_run(run: RunLike, window: float = 0.5, rays_by_stage: dict | None = None) -> dict:
    """All reference comparisons of a run: per stage the Gibbs distance (``τ > 0``),
    the convex distance at the coldest stage, and, when ``rays_by_stage[stage]`` gives
    ``(directions, signs, weights)`` measured at the coldest stage, their matching to the
    convex reference's rays (THEORY §4–5).

    Parameters
    ----------
    run : meanfield.store.Run
    window : float
        Fraction of each stage (its end) over which the particle predictor is time-averaged.
    rays_by_stage : dict, optional
        ``stage -> (directions (J, d+1), signs (J,), weights (J,))``.

    Raises
    ------
    ValueError
        A stage without observations in the window.
    solvers.gibbs.GibbsConvergenceError
        The Gibbs fixed point did not converge.

    Returns
    -------
    dict
        ``{"gibbs": [per stage], "convex": {...}, "rays": {...} or None}``.
    """
    taus = run.taus
    prefetch_gibbs(run)
    gib = [gibbs_distance(run, s, window) for s in range(len(taus))]
    cold = run.schedule.coldest_stage()
    cvx = convex_distance(run, cold, window)
    rays = None
    if rays_by_stage and cold in rays_by_stage:
        ref = convex_reference(run.X, run.y, run.lam)
        dirs, sg, wt = rays_by_stage[cold]
        rays = match_rays(dirs, sg, wt, ref.directions, ref.signs, ref.weights)
    return {"gibbs": gib, "convex": cvx, "rays": rays}


def prefetch_gibbs(run: RunLike) -> None:
    """Solve the Gibbs references of all positive temperatures of a run's ladder at once, by
    continuation from hot to cold (much faster than cold temperatures from scratch), and cache
    them for :func:`gibbs_distance`. Does nothing when ``d > QMC_MAX_D``. With QMC
    (``d > 2``) a temperature whose accuracy is out of reach, or whose fixed point is not
    found, is cached as its error (reported as skipped), and so are the colder ones."""
    if run.d > QMC_MAX_D:
        return
    lam = run.lam
    X = np.ascontiguousarray(run.X, float)
    y = np.ascontiguousarray(run.y, float)
    taus = sorted({t for t in run.taus if t > 0},
                  reverse=True)
    todo = [t for t in taus if _key(X, y, lam, t) not in _CACHE]
    if not todo:
        return
    if choose(run.d) == "quadrature":
        sols = _cached("gibbs", X, y, lam, todo, {}, lambda: gibbs(X, y, lam, todo))
    else:
        sols = _cached("gibbs_qmc", X, y, lam, todo, {"rtol": QMC_RTOL},
                       lambda: _qmc_ladder(X, y, lam, todo))
    for t, sol in zip(todo, sols):
        _CACHE[_key(X, y, lam, t)] = sol


def _qmc_ladder(X, y, lam, taus) -> list:
    """QMC Gibbs references of ``taus`` (hot to cold) by continuation; from the first whose
    accuracy is out of reach or whose fixed point is not found, that error for it and every
    colder one."""
    ref = QMCGibbsReference(X, y, lam, rtol=QMC_RTOL)
    out: list = []
    R = None
    for i, t in enumerate(taus):
        try:
            sol = ref.solve([t], R0=R)[0]
        except (GibbsAccuracyError, GibbsConvergenceError) as exc:
            return out + [exc] * (len(taus) - i)
        out.append(sol)
        R = sol.R
    return out


def report_section(run: RunLike, rep: dict, window: float = 0.5, max_P: int = 20000) -> dict:
    """The ``"references"`` section of ``meanfield analyze``: :func:`compare_run` with the rays
    of the coldest snapshot in ``rep`` matched to the convex reference's rays.

    Skipped (with the reason) for an activation other than ReLU (the references solve the ReLU
    network), and when the data has more than ``max_P`` dichotomies, since the convex reference
    enumerates them.
    """
    act = run.activation
    if act != "relu":
        return {"skipped": f"model.activation = {act!r}: the exact references are for relu"}
    if rep.get("P") is not None and rep["P"] > max_P:
        return {"skipped": f"P = {rep['P']} > {max_P}: the references enumerate the dichotomies"}
    cold = run.schedule.coldest_stage()
    rays_by_stage = None
    snaps = [s for s in rep.get("snapshots", []) if s["stage"] == cold]
    if snaps and snaps[-1]["rays"]:
        rs = snaps[-1]["rays"]
        rays_by_stage = {cold: (np.array([q["direction"] for q in rs]),
                                np.array([q["sign"] for q in rs]),
                                np.array([q["weight"] for q in rs]))}
    try:
        return compare_run(run, window, rays_by_stage)
    except (ValueError, GibbsConvergenceError, ConvexSolverError) as exc:
        # no observations, no convergence, or data the solvers cannot resolve
        return {"skipped": str(exc)}
