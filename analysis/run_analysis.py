"""Analysis of a run: per snapshot rays, kink hyperplanes, ternary patterns and the [LJM26]
Theorem 6 checks; ``P`` of the data; across the temperature ladder ``J(τ)``, ``K(τ)``, risk,
``W2`` to the previous temperature and the distance to a zero-temperature reference; the
[LJM26] Proposition 7 comparison for symmetric two-point data; optionally the exact references.

Pure computation on a run: :class:`analysis.protocols.RunLike`, the declared protocol of what
the analysis reads (:class:`meanfield.store.Run` is one, checked by the type check of
``.ci/run``); the run's config tables are never read. A stage is the index of a ladder step,
never a temperature: a ladder may visit a temperature twice, and every row of the report names
its ``stage``. The results are dataclasses; their ``as_dict()`` is the report document that
``meanfield analyze`` writes (``docs/format.md``), versioned by :data:`REPORT_SCHEMA_VERSION`
(older documents: :func:`upgrade_report`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from analysis import ternary, transport, two_point
from analysis.dichotomies import (
    DEFAULT_MAX_REGIONS,
    DichotomyCount,
    TooManyRegions,
    count_dichotomies,
)
from analysis.frozen import frozen_particles
from analysis.kinks import ray_kinks
from analysis.protocols import RunLike
from analysis.ray_checks import convex_comparison, convex_counts, residual_window
from analysis.ray_checks import sensitivity as ray_sensitivity
from analysis.rays import RayResult, find_rays, label_weight_scale
from analysis.references import convex_reference, report_section
from analysis.snapshots import coldest, last_of_stages
from analysis.stationarity import NOT_STATIONARY, annotate_report, run_verdicts, stage_verdict
from analysis.time_average import chains_of
from solvers import numpy_model
from solvers.convex import ConvexSolverError
from solvers.geometry import Kink
from solvers.integrators import integrator_named


@dataclass
class FrameAnalysis:
    """Rays, kinks, patterns and fit of one snapshot frame.

    Attributes
    ----------
    tau : float
        Temperature of the frame.
    step : int
        Global step of the frame.
    stage : int
        Its stage on the ladder (:attr:`meanfield.store.Run.frame_stage`).
    risk : float
        The stored risk at that step (or the risk of ``f_train`` when none is stored).
    theta : ndarray of shape (N, d+2)
        The particles.
    rays : RayResult
        :func:`analysis.rays.find_rays` on them.
    kinks : list of Kink
        Kink hyperplanes of the rays.
    f_train : ndarray of shape (n,)
        The particle predictor on the training inputs.
    theorem6 : dict
        :func:`analysis.ternary.theorem6` on the rays' patterns.
    """

    tau: float
    step: int
    stage: int
    risk: float
    theta: np.ndarray
    rays: RayResult
    kinks: list[Kink]
    f_train: np.ndarray
    theorem6: dict
    #: The keyword arguments :func:`analysis.rays.find_rays` was called with.
    ray_kw: dict = field(default_factory=dict)
    #: The frames pooled (:func:`analyze_stage`; one frame: ``[k]`` or empty).
    frames: list = field(default_factory=list)
    #: Snapshots pooled in ``theta`` (frames × chains; 1 for one frame).
    replicas: int = 1
    #: A pooled analysis: the last pooled frame of chain 0 alone (``W2`` between stages is
    #: between such snapshots); None for one frame (``theta`` is it).
    snapshot: np.ndarray | None = field(default=None, repr=False)

    @property
    def patterns(self) -> list[list[int]]:
        """Ternary patterns of the rays."""
        return [[int(t) for t in q.pattern] for q in self.rays.rays]

    def as_dict(self) -> dict:
        """The snapshot's entry of the report document."""
        rays = self.rays.rays
        return {"stage": self.stage, "tau": self.tau, "step": self.step, "risk": self.risk,
                "n_rays": len(rays), "n_hyperplanes": len(self.kinks),
                "rays": [q.as_dict() for q in rays], "kinks": [k.as_dict() for k in self.kinks],
                "f_train": [float(v) for v in self.f_train],
                "thresholds": self.rays.thresholds_used(), "rejected": self.rays.rejected,
                "small": self.rays.small, "thermal_mass": self.rays.thermal,
                "merged_across_data_points": self.rays.merged,
                "split_at_valleys": self.rays.split,
                "joined_unresolved_maxima": self.rays.joined,
                "repaired_patterns": self.rays.repaired_patterns,
                "frames_pooled": [int(k) for k in self.frames], "replicas": int(self.replicas),
                "cell_conflicts": self.rays.cell_conflicts, "patterns": self.patterns,
                "theorem6": self.theorem6}


@dataclass
class LadderRow:
    """One stage of the ladder (its last snapshot).

    Attributes
    ----------
    stage : int
        The stage (index into the ladder; a temperature visited twice is two stages).
    tau, step : float, int
        Temperature and step of the snapshot.
    J, K : int
        Rays and kink hyperplanes, as measured; always integers, also at a stage judged not
        stationary (``stationary`` says so, and the report and the command line render such
        a count as "not stationary", :func:`count_text`).
    risk : float
        Risk at the snapshot.
    halo_mass_fraction : float
        Mass the ray finder set aside as thermal halo.
    w2_to_previous : float or None
        ``W2`` to the previous temperature's snapshot (``None`` for the first).
    w2_method : str or None
        ``"exact"`` or ``"sliced"``.
    w2_rays_to_previous : float or None
        ``W2`` between the two ray measures.
    dist_to_reference : float or None
        RMS distance of ``f_train`` to the zero-temperature reference.
    J_convex, K_convex : int or None
        Counts of the convex ``τ → 0`` reference (the same on every row: the limit the row's
        counts are compared with), ``None`` when it is not computed.
    matched, unmatched_measured, unmatched_reference, max_match_angle
        The one-to-one matching of the row's rays to the convex reference's
        (:func:`analysis.ray_checks.convex_comparison`).
    stationary : bool or None
        The stage's stationarity verdict (:func:`analysis.stationarity.run_verdicts`);
        ``None`` when the run has no observations of the stage or no verdict was made.
    stationarity : dict or None
        That verdict (:meth:`analysis.stationarity.Verdict.to_dict`).
    J_chains, K_chains : list of int or None
        A run of several chains (``dynamics.chains``): ``J`` and ``K`` of each chain's last
        snapshot of the stage alone, chain 0 first; ``None`` for one chain.
    chains_agree : bool or None
        Whether every chain's last snapshot has the same ``J`` and ``K`` (``None`` for one
        chain).
    J_frames, K_frames : list of int or None
        ``J`` and ``K`` of single snapshots of the stage's stationary part
        (:func:`diagnostic_frames` of each chain, chain by chain): the per-snapshot spread
        beside the pooled count (``J``, ``K`` are of the pooled frames, :func:`analyze_stage`).
    replicas : int or None
        Snapshots pooled into ``J``, ``K`` (frames × chains).
    J_gibbs, K_gibbs : int or None
        Rays and kink hyperplanes of the exact Gibbs measure at the stage's ``τ``
        (:func:`analysis.gibbs_rays.gibbs_rays`); ``None`` where no Gibbs reference exists.
    gibbs_rays : list of dict or None
        Those rays (:meth:`analysis.gibbs_rays.GibbsRay.as_dict`).
    gibbs_maxima : list of dict or None
        Every local maximum of ``|G|`` with its basin, rays and refused (``is_ray``,
        ``reason``).
    gibbs_matched, gibbs_unmatched_measured, gibbs_unmatched_reference
        The one-to-one matching of the row's rays to the Gibbs rays
        (:func:`analysis.references.match_rays`).
    gibbs_note : str or None
        Why the counts differ where they do (marginal rays near the mass floor; at the coldest
        stage, Gibbs rays that vanish as ``τ → 0`` or convex rays that merge at finite ``τ``).
    frozen : dict or None
        The particles whose direction did not change over the stage's stationary window
        (:func:`analysis.frozen.frozen_particles`: ``mass_fraction``, ``particles`` per chain,
        ``from_step``, ``to_step``); ``None`` with fewer than two frames there.
    """

    stage: int
    tau: float
    step: int
    J: int
    K: int
    risk: float
    halo_mass_fraction: float
    w2_to_previous: float | None = None
    w2_method: str | None = None
    w2_rays_to_previous: float | None = None
    dist_to_reference: float | None = None
    J_convex: int | None = None
    K_convex: int | None = None
    matched: int | None = None
    unmatched_measured: list | None = None
    unmatched_reference: list | None = None
    max_match_angle: float | None = None
    stationary: bool | None = None
    stationarity: dict | None = None
    J_chains: list | None = None
    K_chains: list | None = None
    chains_agree: bool | None = None
    J_frames: list | None = None
    K_frames: list | None = None
    replicas: int | None = None
    J_gibbs: int | None = None
    K_gibbs: int | None = None
    gibbs_rays: list | None = None
    gibbs_maxima: list | None = None
    gibbs_matched: int | None = None
    gibbs_unmatched_measured: list | None = None
    gibbs_unmatched_reference: list | None = None
    gibbs_note: str | None = None
    frozen: dict | None = None

    def as_dict(self) -> dict:
        """The row of the report's ``ladder`` table."""
        return asdict(self)


#: Version of the report document (``report.json``): 2 keeps ``J``, ``K`` integers and
#: renders "not stationary" from ``stationary``; 1 (no ``schema_version`` key) wrote the string
#: into ``J``, ``K`` and the counts into ``J_measured``, ``K_measured`` (:func:`upgrade_report`).
REPORT_SCHEMA_VERSION = 2


def upgrade_report(rep: dict) -> dict:
    """A report document (``report.json``) of any version as the current one.

    Version 1 (no ``schema_version``): a ``ladder`` row judged not stationary held the string
    ``"not stationary"`` in ``J``, ``K`` and the counts in ``J_measured``, ``K_measured``
    (written into every row); the counts go back to ``J``, ``K``.

    Parameters
    ----------
    rep : dict
        The document as read (not modified).

    Returns
    -------
    dict
        A copy at :data:`REPORT_SCHEMA_VERSION`.

    Raises
    ------
    ValueError
        A newer ``schema_version`` than this version reads, or a version 1 row whose ``J`` or
        ``K`` is neither an integer nor ``"not stationary"`` with its measured count.
    """
    version = rep.get("schema_version", 1)
    if not isinstance(version, int) or not 1 <= version <= REPORT_SCHEMA_VERSION:
        raise ValueError(f"report schema_version {version!r}: this version reads 1 to "
                         f"{REPORT_SCHEMA_VERSION}")
    out = {**rep, "schema_version": REPORT_SCHEMA_VERSION}
    if version == 1:
        rows = []
        for i, row in enumerate(rep.get("ladder", [])):
            row = dict(row)
            for key in ("J", "K"):
                if key not in row and f"{key}_measured" not in row:
                    continue
                measured = row.pop(f"{key}_measured", row.get(key))
                if measured is not None and (not isinstance(measured, int)
                                             or isinstance(measured, bool)):
                    raise ValueError(f"report ladder[{i}].{key} = {row.get(key)!r} without "
                                     f"an integer {key}_measured")
                row[key] = measured
            rows.append(row)
        out["ladder"] = rows
    return out


def count_text(row: dict, key: str) -> str:
    """A count of a ``ladder`` row (``"J"``, ``"K"``) as the report and the command line show
    it: the integer (of the stage's pooled frames), followed by ``"(not stationary)"`` when
    the row's stage is judged not stationary (a count measured there need not be the
    stationary measure's), and by the range of the single snapshots' counts when any differs
    from it (``J_frames``; older reports: the per-chain counts when the chains disagree)."""
    per = row.get(f"{key}_frames")
    spread = ""
    if per and set(per) != {row[key]}:
        lo, hi = min(per), max(per)
        spread = f" (one snapshot: {lo}–{hi})" if lo != hi else f" (one snapshot: {lo})"
    elif not per:
        chains = row.get(f"{key}_chains")
        if chains and len(set(chains)) > 1:
            if len(chains) <= 4:
                shown = ", ".join(str(v) for v in chains)
            else:               # a tally: 64 numbers in a cell are not read
                shown = ", ".join(f"{v} ×{chains.count(v)}" for v in sorted(set(chains)))
            spread = f" (chains disagree: {shown})"
    if row.get("stationary") is False:
        return f"{row[key]} ({NOT_STATIONARY}){spread}"
    return f"{row[key]}{spread}"


@dataclass
class RunAnalysis:
    """Everything ``meanfield analyze`` computes for a run.

    Attributes
    ----------
    run : str
        The run file.
    d, n : int
        Input dimension and number of training points.
    X : ndarray of shape (n, d)
        The training inputs.
    y : ndarray of shape (n,)
        The training targets.
    dichotomies : DichotomyCount
        ``P`` of the training inputs.
    complete : bool
        The run reached the end of its ladder.
    frames : list of FrameAnalysis
        Every snapshot frame, in ladder order.
    ladder : list of LadderRow
        One row per stage that has a snapshot.
    two_point : list of dict or None
        The [LJM26] Proposition 7 comparison per temperature (symmetric two-point data only).
    references : dict or None
        :func:`analysis.references.report_section` (when asked for).
    verdicts : list of analysis.stationarity.Verdict or None
        The stationarity verdict of every ladder stage (:func:`analysis.stationarity
        .run_verdicts`), one per stage of the ladder ``taus``.
    taus : tuple of float
        The run's ladder.
    integrator : str
        The run's ``dynamics.integrator`` (what a step is: a time step, or a pass of the exact
        sampler, :attr:`solvers.integrators.Integrator.step_unit`).
    """

    run: str
    d: int
    n: int
    X: np.ndarray
    y: np.ndarray
    dichotomies: DichotomyCount
    complete: bool
    frames: list[FrameAnalysis]
    ladder: list[LadderRow]
    two_point: list | None = None
    references: dict | None = None
    convex_counts: dict | None = None
    sensitivity: dict | None = None
    verdicts: list | None = None
    taus: tuple = ()
    integrator: str = "em"

    @property
    def theorem6(self) -> dict | None:
        """Theorem 6 checks and the bounds of the coldest snapshot (:func:`coldest`)."""
        if not self.frames:
            return None
        last = coldest(self.frames)
        res = last.rays
        th = last.theorem6
        reason = None
        if not res.resolved:
            # a pooled stage holds `replicas` snapshots: N and the rule's count are per snapshot
            reps = max(1, int(last.replicas))
            per = "" if reps == 1 else f" per snapshot ({reps} snapshots pooled)"
            least = res.min_particles if reps == 1 else -(-res.min_particles // reps)
            reason = (f"N = {len(last.theta) // reps} is too small for a verdict: "
                      f"{len(res.small)} heavy cluster(s) with fewer than {least} "
                      f"particles{per}")
        elif res.repaired_patterns:
            reason = (f"ray(s) {[m['ray'] for m in res.repaired_patterns]} had a ternary pattern "
                      f"no direction can have on these data (more zeros than a direction can "
                      f"lie on): one ray is two, or the tolerances are too wide")
        elif th.get("explained_by_cells"):
            reason = (f"the failing pairs {th['conflicts_in_failures']} are rays of one sign "
                      f"sharing an activation cell (one ray split, or not stationary)")
        return {**th, **ternary.bounds(self.dichotomies.P, len(res.rays)),
                "decided": reason is None, "undecided_reason": reason}

    def as_dict(self) -> dict:
        """The report document (``report.json``; keys in ``docs/cli.md``)."""
        dc, last, P = self.dichotomies, coldest(self.frames), self.dichotomies.P
        rows = [r.as_dict() for r in self.ladder]
        rep = {"schema_version": REPORT_SCHEMA_VERSION, "run": self.run, "d": self.d, "n": self.n, "P": P, "cover": dc.cover,
               "general_position": dc.general_position, "P_exact": dc.exact,
               "P_tol_range": None if dc.tol_range is None else list(dc.tol_range),
               "P_closed_form": dc.closed_form,
               "bound_2P_minus_1": 2 * P - 1, "bound_P_minus_1": P - 1,
               "complete": self.complete, "integrator": self.integrator,
               "step_unit": integrator_named(self.integrator).step_unit,
               "n_rays_by_tau": [{"stage": f.stage, "tau": f.tau, "step": f.step,
                                  "n_rays": len(f.rays.rays), "n_hyperplanes": len(f.kinks)}
                                 for f in self.frames],
               "ladder": rows,
               "w2_to_previous": [{"stage": r["stage"], "tau": r["tau"],
                                   "w2": r["w2_to_previous"],
                                   "method": r["w2_method"], "w2_rays": r["w2_rays_to_previous"]}
                                  for r in rows[1:]],
               "patterns": last.patterns if last else [],
               "pattern_tolerance": (last.rays.pattern_tol.as_dict() if last
                                     else ternary.PatternTolerance().as_dict()),
               "theorem6": self.theorem6, "two_point": self.two_point,
               "snapshots": [f.as_dict() for f in self.frames]}
        if self.references is not None:
            rep["references"] = self.references
        if self.convex_counts is not None:
            rep["convex_counts"] = self.convex_counts
        if self.sensitivity is not None:
            rep["sensitivity"] = self.sensitivity
        if self.verdicts is not None:
            annotate_report(rep, self.verdicts)
        return rep


def _obs_at(run, name, step):
    o = run.observables[name]
    sel = np.nonzero(o["step"] == step)[0]
    return o["value"][sel[0]] if sel.size else None


def analyze_frame(run: RunLike, k: int, *, progress: Callable | None = None,
                  **ray_kw) -> FrameAnalysis:
    """Rays, kinks, patterns and fit of frame ``k`` of a run.

    Parameters
    ----------
    run : meanfield.store.Run or alike
        The run.
    k : int
        Frame index.
    progress : callable ``(done, total)``, optional
        Told after each chunk of the neighbour queries of the ray linkage
        (:func:`analysis.rays.find_rays`).
    **ray_kw
        Passed to :func:`analysis.rays.find_rays` (the run's ``y`` and ``lam`` are passed, so
        the certificate filters are on).

    Returns
    -------
    FrameAnalysis

    Raises
    ------
    IndexError
        ``k`` out of range.
    """
    return _analysis_of(run, run.frame(k), k, frame_ray_kw(run, k, **ray_kw), progress)


def _analysis_of(run: RunLike, theta, k: int, kw: dict, progress, **extra) -> FrameAnalysis:
    """:class:`FrameAnalysis` of particles ``theta`` standing for frame ``k`` (its step,
    temperature, stage and stored risk), rays by :func:`analysis.rays.find_rays` with ``kw``;
    ``extra``: the pooled fields (``frames``, ``replicas``, ``snapshot``)."""
    res = find_rays(theta, run.X, **kw, progress=progress)
    kinks = ray_kinks(res.rays, run.X, res.pattern_tol.angle_tol)
    step = int(run.frame_step[k])
    risk = _obs_at(run, "risk", step)
    f_train = numpy_model.predict(theta, run.X)
    return FrameAnalysis(
        tau=float(run.frame_tau[k]), step=step, stage=int(run.frame_stage[k]),
        risk=float(risk) if risk is not None else float(np.mean((f_train - run.y) ** 2)),
        theta=theta, rays=res, kinks=kinks, f_train=f_train,
        theorem6=ternary.theorem6([q.pattern for q in res.rays], res.cell_conflicts),
        ray_kw=kw, **extra)


#: The part of a stage whose frames are pooled into its stationary sample: its last half, the
#: window of the stationarity verdict and of the time averages (docs/theory.md §6.1).
POOL_WINDOW = 0.5
#: The most snapshots (frames × chains) pooled for a stage's rays; evenly spaced frames of the
#: stationary part are taken when it holds more (docs/theory.md §6.1).
POOL_SNAPSHOTS = 16


def stage_frames(run: RunLike, stage: int, window: float = POOL_WINDOW) -> list[int]:
    """Frame indices of stage ``stage`` in the last ``window`` fraction of the stage (its last
    frame when none falls there), in step order.

    Raises
    ------
    ValueError
        The stage has no frame.
    """
    steps, stages = np.asarray(run.frame_step), np.asarray(run.frame_stage)
    mine = np.nonzero(stages == stage)[0]
    if mine.size == 0:
        raise ValueError(f"stage {stage} has no snapshot frame")
    cut = run.schedule.last_part(stage, window)[0]
    late = mine[steps[mine] > cut]
    return [int(k) for k in (late if late.size else mine[-1:])]


def analyze_stage(run: RunLike, stage: int, *, window: float = POOL_WINDOW,
                  progress: Callable | None = None, **ray_kw) -> FrameAnalysis:
    """Rays, kinks, patterns and fit of the stationary measure of a stage: the particles of
    the frames in the stage's last ``window`` fraction (:func:`stage_frames`; at most
    :data:`POOL_SNAPSHOTS` snapshots in all, evenly spaced frames), of every chain, pooled,
    each weighted by its mass (docs/theory.md §6.1).

    A ray's weight and mass fraction are averages over the pooled snapshots; the certificate
    ``G`` is computed from the residuals averaged over the same window and every chain.

    Parameters
    ----------
    run : meanfield.store.Run or alike
        The run (its chains: :func:`analysis.time_average.chains_of`).
    stage : int
        The stage (index into the ladder).
    window : float
        Fraction of the stage whose frames are pooled (default :data:`POOL_WINDOW`).
    progress : callable ``(done, total)``, optional
        As :func:`analyze_frame`.
    **ray_kw
        Passed to :func:`analysis.rays.find_rays` (after the run's ``lam``, ``tau``, weight
        scale and the averaged residuals ``R``).

    Returns
    -------
    FrameAnalysis
        ``theta`` of shape (F·N, d+2), the pooled particles; ``step`` the last pooled frame's;
        ``frames`` the pooled frame indices; ``replicas`` the snapshots pooled (frames ×
        chains); ``snapshot`` the last frame of chain 0 alone.

    Raises
    ------
    ValueError
        The stage has no frame.
    """
    chains = chains_of(run)
    frames = diagnostic_frames(stage_frames(run, stage, window),
                               max(1, POOL_SNAPSHOTS // len(chains)))
    theta = np.concatenate([c.frame(k) for c in chains for k in frames])
    replicas = len(frames) * len(chains)
    k_last = frames[-1]
    series = [residual_window(c, k_last, window) for c in chains]
    kw = frame_ray_kw(run, k_last, **ray_kw)
    if all(S is not None for S in series):
        kw.pop("y", None)
        kw["R"] = np.mean([S.mean(axis=0) for S in series], axis=0)
        kw["R_series"] = series
        kw.update(ray_kw)
    kw["replicas"] = replicas
    return _analysis_of(run, theta, k_last, kw, progress, frames=frames, replicas=replicas,
                        snapshot=run.frame(k_last))


def frame_ray_kw(run: RunLike, k: int, **ray_kw) -> dict:
    """Keyword arguments of :func:`analysis.rays.find_rays` for frame ``k`` of a run: ``lam``,
    the frame's ``tau`` (halo tests against ``(d+1)τ/λ``), the labels' weight scale
    ``weight_scale`` (the certificate-gap test, docs/theory.md §6.5), the stage's time-averaged residuals
    ``R`` and the observations it averages, ``R_series``
    (:func:`analysis.ray_checks.residual_window`; else ``y``: the snapshot's own), and
    ``ray_kw``."""
    rows = residual_window(run, k)
    kw: dict[str, Any] = {"lam": float(run.lam), "tau": float(run.frame_tau[k]),
          "weight_scale": label_weight_scale(run.X, run.y)}
    kw.update({"R": rows.mean(axis=0), "R_series": [rows]} if rows is not None
              else {"y": run.y})
    kw.update(ray_kw)
    return kw


def _reference_values(reference, X):
    """The zero-temperature reference predictor on the training inputs, or None."""
    if reference is None:
        return None
    if callable(reference):
        return np.asarray(reference(X), dtype=float).ravel()
    ref = np.asarray(reference, dtype=float).ravel()
    if ref.shape[0] != X.shape[0]:
        raise ValueError(f"reference has {ref.shape[0]} values, the data {X.shape[0]} points")
    return ref


def ladder(X: ArrayLike, frames: list[FrameAnalysis], reference: ArrayLike | Callable | None = None,
           w2: bool = True, **w2_kw) -> list[LadderRow]:
    """One row per stage of the ladder (its last snapshot).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        The training inputs.
    frames : list of FrameAnalysis
        :func:`analyze_frame` of every frame, in ladder order (their ``stage`` says which
        frame is the last of a stage).
    reference : ndarray of shape (n,) or callable, optional
        Zero-temperature reference predictor on the training inputs (or a function of ``X``),
        e.g. the convex ``τ → 0`` solution (THEORY §4); without it the distance is ``None``.
    w2 : bool
        Compute ``W2`` to the previous temperature (exact up to 10⁴ particles, else sliced;
        :mod:`analysis.transport`).
    **w2_kw
        Passed to :func:`analysis.transport.w2_snapshots`.

    Returns
    -------
    list of LadderRow

    Raises
    ------
    ValueError
        A reference with another number of values than training points.
    """
    ref = _reference_values(reference, np.asarray(X))
    rows, prev = [], None
    for f in last_of_stages(frames):
        row = LadderRow(stage=f.stage, tau=f.tau, step=f.step, J=len(f.rays.rays), K=len(f.kinks), risk=f.risk,
                        halo_mass_fraction=f.rays.thresholds_used()["halo_mass_fraction"])
        if prev is not None and w2:
            a = prev.theta if prev.snapshot is None else prev.snapshot
            b = f.theta if f.snapshot is None else f.snapshot
            d = transport.w2_snapshots(a, b, **w2_kw)
            row.w2_to_previous, row.w2_method = d["w2"], d["method"]
            ra, rb = prev.rays.rays, f.rays.rays
            if ra and rb:
                row.w2_rays_to_previous = transport.w2_rays(
                    [q.direction for q in ra], [q.weight for q in ra],
                    [q.direction for q in rb], [q.weight for q in rb])["w2"]
        if ref is not None:
            row.dist_to_reference = float(np.sqrt(np.mean((np.asarray(f.f_train) - ref) ** 2)))
        rows.append(row)
        prev = f
    return rows


#: Snapshot frames of a stage whose rays are also counted one by one, per chain (the spread
#: of those counts is the per-snapshot uncertainty the report gives beside the pooled count).
DIAGNOSTIC_FRAMES = 2


def diagnostic_frames(pool: list[int], at_most: int = DIAGNOSTIC_FRAMES) -> list[int]:
    """Up to ``at_most`` of the pooled frames ``pool``, evenly spaced, the last included."""
    if len(pool) <= at_most:
        return list(pool)
    pick = np.unique(np.round(np.linspace(0, len(pool) - 1, at_most)).astype(int))
    return [pool[i] for i in pick]


def analyze(run: RunLike, *, reference: ArrayLike | Callable | None = None, w2: bool = True,
            references: bool = False, convex: bool | None = None, sensitivity: bool = False,
            progress: Any = None, max_regions: int | None = DEFAULT_MAX_REGIONS,
            **ray_kw) -> RunAnalysis:
    """Analyse every snapshot frame of a run and its temperature ladder.

    Parameters
    ----------
    run : meanfield.store.Run or alike
        The run (see the module docstring for the attributes used).
    reference : ndarray of shape (n,) or callable, optional
        Zero-temperature reference predictor on the training inputs (see :func:`ladder`).
    w2 : bool
        Compute ``W2`` between successive temperatures.
    references : bool
        Compare with the exact references (THEORY §4–5): the Gibbs fixed point at each ``τ``
        (``d ≤ 2``), the convex ``τ → 0`` limit at the coldest ``τ`` (also used as
        ``reference`` when that is not given, for ``P ≤ 20000``), and the matching of rays to
        its rays (:func:`analysis.references.report_section`); per ``τ`` of the ladder the
        convex reference's counts ``J_convex``, ``K_convex`` (rays with weight at least the ray
        mass floor, :func:`analysis.ray_checks.convex_counts`) and the matching of the
        measured rays to them.
    convex : bool, optional
        The convex counts and matching only, without the Gibbs references (default:
        ``references``).
    sensitivity : bool
        ``J`` and ``K`` of the coldest snapshot over a range of each threshold
        (:func:`analysis.ray_checks.sensitivity`; about 15 more ray analyses).
    progress : object, optional
        Told of each part done: ``update(1)`` after each stage's rays (its diagnostic frames
        and its pooled frames), the ladder and the references, ``set_postfix(doing=...)``
        before each (``n_stages + 1 + references`` parts; a tqdm
        bar fits). While ``P`` is counted, its postfix says how many regions are done and
        ``update(0)`` is called after each slice of the enumeration.
    max_regions : int or None
        Limit on the regions the count of ``P`` may enumerate
        (:func:`analysis.dichotomies.count_dichotomies`; default
        :data:`analysis.dichotomies.DEFAULT_MAX_REGIONS`). When the float count is ambiguous
        and the exact recount would exceed it, the float count is kept.
    **ray_kw
        Passed to :func:`analysis.rays.find_rays`.

    Returns
    -------
    RunAnalysis

    Raises
    ------
    ValueError
        A reference with another number of values than training points.
    analysis.dichotomies.TooManyRegions
        Counting ``P`` would exceed ``max_regions`` (a ``ValueError``).
    """
    def tell(doing=None, done=0):
        if progress is not None:
            if done:
                progress.update(done)
            if doing:
                progress.set_postfix(doing=doing)

    def regions(done, bound):
        if progress is not None:
            progress.set_postfix(doing=f"P: {done:.3g} of at most {bound:.3g} regions")
            progress.update(0)

    tell("P")
    dc = count_dichotomies(run.X, max_regions=max_regions, progress=regions)
    if dc.ambiguous:
        try:
            dc = count_dichotomies(run.X, exact=True, max_regions=max_regions, progress=regions)
        except TooManyRegions:
            pass            # the float count stays, flagged near its tolerance in the report
    frames, per_frame, frozen = [], {}, {}
    chains = chains_of(run)
    stages = sorted({int(s) for s in run.frame_stage})
    for st in stages:
        pool = stage_frames(run, st)
        frozen[st] = frozen_particles(run, pool)
        diag = diagnostic_frames(pool)
        counts = []
        for c_i, c in enumerate(chains):
            for k in diag:
                doing = f"rays of stage {st + 1}, chain {c_i + 1}, frame {k + 1}"
                tell(doing)
                fa = analyze_frame(c, k, **ray_kw)
                counts.append((len(fa.rays.rays), len(fa.kinks)))
                if c_i == 0 and k != pool[-1]:      # the pooled entry stands at the last
                    frames.append(fa)
        per_frame[st] = counts
        doing = (f"rays of stage {st + 1}: {len(pool)} frames x {len(chains)} chains pooled")
        tell(doing)

        def queries(done, total, doing=doing):
            if progress is not None and total:
                progress.set_postfix(doing=f"{doing}: neighbours {100 * done // total}%")
                progress.update(0)
        frames.append(analyze_stage(run, st, progress=queries, **ray_kw))
        tell(done=1)
    tell("W2 between temperatures" if w2 else "ladder")
    if convex is None:
        convex = references
    cvx = None
    if (references or convex) and dc.P <= 20000:
        try:
            cvx = convex_reference(run.X, run.y, run.lam)
        except ConvexSolverError:
            pass                # data the solver cannot resolve: the references section says so
        if cvx is not None and reference is None:
            reference = cvx.f_train
    tp = None
    if two_point.detect(run.X, run.y) is not None:
        tp = []
        for f in last_of_stages(frames):    # symmetric two-point data: compare gives a dict
            cmp = two_point.compare(run.X, run.y, run.lam, f.kinks, [float(v) for v in f.f_train])
            if cmp is not None:
                tp.append({"stage": f.stage, "tau": f.tau, **cmp})
    result = RunAnalysis(run=str(run.path), d=run.d, n=run.n, X=run.X, y=run.y, dichotomies=dc,
                         complete=run.complete, frames=frames,
                         ladder=ladder(run.X, frames, reference, w2), two_point=tp,
                         integrator=str(getattr(run, "integrator", "em")))
    floor = ray_kw.get("min_mass_frac", 1e-2)
    if cvx is not None:
        cc = convex_counts(cvx, run.X, floor=floor)
        per_stage = {f.stage: f for f in last_of_stages(frames)}
        for r in result.ladder:
            m = convex_comparison(per_stage[r.stage].rays.rays, cc)
            r.J_convex, r.K_convex, r.matched = cc["J"], cc["K"], len(m["pairs"])
            r.unmatched_measured = m["unmatched_measured"]
            r.unmatched_reference = m["unmatched_reference"]
            r.max_match_angle = None if not m["pairs"] else float(m["max_angle"])
        result.convex_counts = {
            "J": cc["J"], "K": cc["K"], "floor": cc["floor"],
            "rays": [{"direction": [float(x) for x in v], "weight": float(w)}
                     for v, w in zip(cc["directions"], cc["weights"])],
            "kinks": [kk.as_dict() for kk in cc["kinks"]]}
    if sensitivity and frames:
        last = coldest(frames)
        result.sensitivity = {"tau": last.tau, "step": last.step,
                              **ray_sensitivity(last.theta, run.X, last.ray_kw, conv=cvx,
                                                floor=floor)}
    pooled = {f.stage: f for f in last_of_stages(frames)}
    for r in result.ladder:
        counts = per_frame[r.stage]
        r.J_frames, r.K_frames = [j for j, _ in counts], [k for _, k in counts]
        r.replicas = pooled[r.stage].replicas
        r.frozen = frozen.get(r.stage)
        if len(chains) > 1:         # each chain's last snapshot (the last of its diagnostics)
            per = len(counts) // len(chains)
            r.J_chains = [counts[(c + 1) * per - 1][0] for c in range(len(chains))]
            r.K_chains = [counts[(c + 1) * per - 1][1] for c in range(len(chains))]
            r.chains_agree = len(set(r.J_chains)) == 1 and len(set(r.K_chains)) == 1
    result.verdicts, result.taus = run_verdicts(run), tuple(run.taus)
    for r in result.ladder:
        r.stationary, r.stationarity = stage_verdict(result.verdicts, r.stage)
    tell("exact references (Gibbs at each tau, convex limit)" if references else None, 1)
    if references:
        result.references = report_section(run, result.as_dict())
        if getattr(run, "activation", "relu") == "relu" and dc.P <= 20000:
            # per stage: a stage whose reference fails says so in its note
            tell("rays of the exact Gibbs measure at each tau")
            gibbs_ladder(run, result.ladder, last_of_stages(frames), cvx, floor=floor,
                         **{k: v for k, v in ray_kw.items()
                            if k in GIBBS_RULE_KEYS + GIBBS_NOTE_KEYS})
        tell(done=1)
    return result


#: The thresholds of :func:`analysis.rays.find_rays` that the Gibbs rays share.
GIBBS_RULE_KEYS = ("g_ray", "halo_ratio", "thermal_gap", "weight_scale", "particle_halo",
                   "pattern_tol")
#: Thresholds of :func:`analysis.rays.find_rays` the note of :func:`gibbs_ladder` reads.
GIBBS_NOTE_KEYS = ("max_spread",)
#: A ray whose mass fraction is within this factor of the mass floor is marginal: whether it
#: counts is decided by sampling noise (particles) or by the floor itself (Gibbs).
MARGINAL_FACTOR = 1.5
def _vec(v) -> str:
    return "(" + ", ".join(f"{x:.3f}" for x in v) + ")"


#: A Gibbs maximum whose basin's mean kept particle mass is within this factor of the
#: heaviness threshold (``halo_ratio`` baselines) is at the heaviness edge: whether it counts is
#: decided by a few per cent of mean mass (the particles' sampling of it, their width bias).
HEAVY_MARGIN = 1.1
#: A Gibbs ray whose basin's RMS angle exceeds this (the particles' compactness limit
#: ``max_spread`` of :func:`analysis.rays.find_rays`) is called broad in the note, where the
#: stage's rays came from the linkage rule (the basins rule has no compactness limit).
BROAD_SPREAD = 0.3


def gibbs_ladder(run: RunLike, rows: list[LadderRow], stages: list[FrameAnalysis], cvx=None,
                 floor: float = 1e-2, **rule) -> None:
    """Fill the Gibbs columns of the ladder rows (``J_gibbs``, ``K_gibbs``, ``gibbs_rays``,
    the matching and ``gibbs_note``): the rays of the exact Gibbs measure at each stage's
    ``τ`` (:func:`analysis.gibbs_rays.gibbs_rays`, the same mass floor and thresholds as the
    particles'), matched one to one to the stage's pooled rays. Stages whose reference cannot
    be had (``d`` beyond the QMC reference, no convergence, too many activation cells) keep
    ``None`` and say why in ``gibbs_note``."""
    from analysis.gibbs_rays import gibbs_rays
    from analysis.references import QMC_MAX_D, gibbs_reference, match_rays
    from solvers.activation_regions import TooManyPatterns, activation_patterns
    from solvers.errors import InputError
    from solvers.gibbs import GibbsConvergenceError
    from solvers.gibbsqmc import GibbsAccuracyError
    if run.d > QMC_MAX_D:
        for r in rows:
            r.gibbs_note = f"no Gibbs reference for d = {run.d} > {QMC_MAX_D}"
        return
    try:
        patterns, _ = activation_patterns(run.X)
    except TooManyPatterns as exc:
        for r in rows:
            r.gibbs_note = f"no Gibbs rays: {exc}"
        return
    by_stage = {f.stage: f for f in stages}
    results = {}
    for r in rows:
        try:
            sol = gibbs_reference(run.X, run.y, run.lam, r.tau)
        except (GibbsConvergenceError, GibbsAccuracyError, InputError,
                np.linalg.LinAlgError) as exc:
            r.gibbs_note = f"no Gibbs reference at this tau: {exc}"
            continue
        gr = gibbs_rays(sol, min_mass_frac=floor, patterns=patterns,
                        **{k: v for k, v in rule.items() if k in GIBBS_RULE_KEYS})
        results[r.stage] = gr
        r.J_gibbs, r.K_gibbs = gr.J, gr.K
        r.gibbs_rays = [q.as_dict() for q in gr.rays]
        r.gibbs_maxima = [q.as_dict() for q in gr.maxima]
        mine = by_stage[r.stage].rays.rays
        m = match_rays([q.direction for q in mine], [q.sign for q in mine],
                       [q.weight for q in mine], [q.mean_direction for q in gr.rays],
                       [q.sign for q in gr.rays], [q.weight for q in gr.rays])
        r.gibbs_matched = len(m["pairs"])
        r.gibbs_unmatched_measured = m["unmatched_measured"]
        r.gibbs_unmatched_reference = m["unmatched_reference"]
        notes = []
        marginal = [q for q in gr.maxima if floor / MARGINAL_FACTOR <= q.mass_fraction
                    <= floor * MARGINAL_FACTOR and abs(q.G) >= (rule.get("g_ray", 0.5))]
        if marginal:
            notes.append("marginal Gibbs ray(s) near the mass floor " + ", ".join(
                f"{q.mass_fraction:.3g} ({'counted' if q.is_ray else 'not counted'})"
                for q in marginal) + f" (floor {floor:g})")
        hr = rule.get("halo_ratio", 3.0)
        edge = [q for q in gr.maxima if q.mass_fraction >= floor / MARGINAL_FACTOR
                and abs(q.G) >= rule.get("g_ray", 0.5)
                and hr / HEAVY_MARGIN <= q.mean_mass <= hr * HEAVY_MARGIN]
        if edge:
            notes.append("at the heaviness edge: mean particle mass " + ", ".join(
                f"{q.mean_mass:.3g} ({'counted' if q.is_ray else 'not counted'})"
                for q in edge) + f" free-particle baselines (d+1)tau/lam, a ray needs {hr:g}")
        far = [f"particle ray {_vec(mine[i].direction)} mass {mine[i].mass_fraction:.3g}"
               for i in m["unmatched_measured"]]
        far += [f"Gibbs ray {_vec(gr.rays[j].mean_direction)} mass "
                f"{gr.rays[j].mass_fraction:.3g}" for j in m["unmatched_reference"]]
        if far:
            notes.append("unmatched: " + "; ".join(far))
        res = by_stage[r.stage].rays
        if res.small:
            per = res.min_particles / max(res.replicas, 1)
            notes.append(f"N too small: particle cluster(s) refused only for holding fewer "
                         f"than {res.min_particles} pooled particles ({per:g} per snapshot): "
                         + "; ".join(f"{_vec(c['direction'])} mass {c['mass_fraction']:.3g} in "
                                     f"{c['n_particles']}" for c in res.small))
        broad = [q for q in gr.rays if q.spread > rule.get("max_spread", BROAD_SPREAD)
                 and by_stage[r.stage].rays.rule == "linkage"]
        if broad:
            notes.append("broad Gibbs ray(s), basin RMS spread " + ", ".join(
                f"{q.spread:.2f}" for q in broad) + " rad (a concentration this wide is no "
                "compact cluster of particles: counts at this tau are not sharp)")
        marg_p = [q for q in mine if q.mass_fraction <= floor * MARGINAL_FACTOR]
        if marg_p:
            notes.append("marginal particle ray(s) " + ", ".join(
                f"{q.mass_fraction:.3g}" for q in marg_p))
        r.gibbs_note = "; ".join(notes) or None
    if cvx is None or not rows:
        return
    cold = max((r for r in rows if r.tau == min(x.tau for x in rows)), key=lambda r: r.stage)
    if cold.stage not in results:
        return
    gr_cold = results[cold.stage]
    from analysis.ray_checks import convex_counts
    cc = convex_counts(cvx, run.X, floor=floor)
    if (gr_cold.J, gr_cold.K) == (cc["J"], cc["K"]):
        return
    m = match_rays([q.direction for q in gr_cold.rays], [q.sign for q in gr_cold.rays],
                   [q.weight for q in gr_cold.rays], cc["directions"], cc["signs"], cc["weights"])
    why = []
    w_all = np.abs(np.asarray(cvx.weights, dtype=float))
    for i in m["unmatched_measured"]:
        q = gr_cold.rays[i]
        below = [k for k in range(len(w_all)) if w_all[k] < floor * w_all.sum()
                 and np.sign(cvx.weights[k]) == q.sign
                 and float(np.dot(cvx.directions[k], q.direction)) > np.cos(0.2)]
        if below:
            why.append(f"Gibbs ray {i} (mass {q.mass_fraction:.3g}) is a convex ray below the "
                       f"floor (weight {w_all[below[0]] / w_all.sum():.3g} of sum|c|): the "
                       f"floor, not the measure, tells them apart")
            continue
        trend = [results[x.stage] for x in rows if x.stage in results]
        fr = []
        for t in trend:
            near = [p for p in t.maxima if p.sign == q.sign
                    and float(np.dot(p.direction, q.direction)) > np.cos(0.2)]
            fr.append(max((p.mass_fraction for p in near), default=0.0))
        falling = all(b <= a for a, b in zip(fr, fr[1:])) and len(fr) > 1
        why.append(f"Gibbs ray {i} (mass {q.mass_fraction:.3g}) has no convex ray"
                   + (f": its mass falls along the ladder ({', '.join(f'{v:.3g}' for v in fr)})"
                      f", it vanishes as tau -> 0" if falling else ""))
    for j in m["unmatched_reference"]:
        why.append(f"convex ray {j} (weight {abs(cc['weights'][j]):.3g}) has no Gibbs ray at "
                   f"this tau (merged with a neighbour, or below the floor at finite tau)")
    note = (f"coldest tau: Gibbs J, K = {gr_cold.J}, {gr_cold.K} against the convex {cc['J']}, "
            f"{cc['K']}: " + "; ".join(why))
    cold.gibbs_note = note if not cold.gibbs_note else cold.gibbs_note + "; " + note
