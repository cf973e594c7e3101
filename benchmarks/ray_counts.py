"""Ray and kink counts of particle runs against the exact ``τ → 0`` (convex) reference.

For every data set × width ``N`` × seed, a run with a shortened ladder (the two or three
coldest temperatures, a fixed span of mean-field time per stage), then at the coldest
stationary temperature of the ladder: ``J`` (rays) and ``K`` (kink hyperplanes) of the last
snapshot, as ``meanfield analyze`` counts them, next to the convex reference's counts of rays
with weight at least the stated floor (THEORY §6.4). One row per cell, and a note per
disagreement with the measured quantities that explain it.

The sets are the shipped configs (the [SKM22] sets, plane8, the two-point sets) and generated
ones whose configs carry their data (:data:`SETS`): data whose convex limit has no ray
(``zero_d1``, ``zero_d2``: every cluster is thermal mass), 1-D data with kinks on data points
(``nine_1d``, ``six_1d``, THEORY §6.6), eight points in R³ (``gauss8_d3``) and ten Gaussian
points in the plane with random labels (``gauss10_d2``).

    python benchmarks/ray_counts.py                          # everything (hours on one core)
    python benchmarks/ray_counts.py --sets D12 plane8 --N 500 --seeds 0
    python benchmarks/ray_counts.py --runs-only              # make the run files, no table
    python benchmarks/ray_counts.py --json out.json          # also write the rows
    python benchmarks/ray_counts.py --sets D7 --integrator mala --chains 2   # exact sampler
    python benchmarks/ray_counts.py --integrator mala --auto --auto-steps 40000  # each stage
                                                        # until its verdict, at most 40 000 passes

Run files are kept in ``--workdir`` (default ``ray_counts_runs``) and reused: a second call
only analyses. The configs are written next to them
(``<set>-N<N>-s<seed>[-x<span scale>][-<integrator>][-c<chains>][-eta<eta>][-auto].toml``: the
stage length, an overridden integrator, the chain count, an overridden step and stages that end
at their verdict are part of the name, so cells of other settings are never mixed).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common import package_env  # noqa: E402  (the `meanfield run` children)

#: The generated sets' data: nine 1-D points with every convex kink on a data point (THEORY
#: §6.6: x = ±0.25, ±0.75), and six 1-D points whose convex limit has two rays on the kink at
#: the data point x = −0.4 and a third kink on x = 0.
NINE_1D = {"kind": "inline", "X": [[-1.0], [-0.75], [-0.5], [-0.25], [0.0], [0.25], [0.5],
                                   [0.75], [1.0]],
           "y": [1.0, 0.2, 0.6, 0.1, 0.9, 0.1, 0.6, 0.2, 1.0]}
SIX_1D = {"kind": "inline", "X": [[-1.0], [-0.4], [0.0], [0.3], [0.7], [1.0]],
          "y": [0.7, -0.9, 0.5, -0.6, 0.7, 0.1]}


def _generated(data: dict, lam: float, eta: float = 0.05) -> dict:
    """The tables of a generated set's config (no shipped file): ``[data]``, ``lam``, ``η``."""
    return {"data": data, "model": {"activation": "relu"},
            "dynamics": {"lam": lam, "eta": eta}}


#: name -> (shipped config under data/, or the tables of a generated one; overrides of
#: [dynamics]; ladder; mean-field time per stage).
#: D4's shipped eta = 0.01 is beyond the Euler stability limit of its data mode (THEORY §2:
#: eta·λmax(K)/n ≈ 2.5 > 2); 0.005 is stable.
#: Generated sets, with their convex counts (rays of weight ≥ 1 % of Σ|c|): ``zero_d1``,
#: ``zero_d2``, gaussian(n = 6, seed = 1) at λ = 1.28 λ₀ and 1.25 λ₀ above the threshold
#: λ₀ = max_v |Σ_j y_j (v·x̃_j)_+|/n (0.2187, 0.2562) where f = 0 is optimal (J = K = 0;
#: every cluster is thermal mass, THEORY §6.5); ``nine_1d`` (J = K = 4) and ``six_1d``
#: (J = 4, K = 3) with kinks on data points at λ = 0.01 (the slow rate λ: longer stages);
#: ``gauss8_d3``, eight Gaussian points in R³ (J = K = 4); ``gauss10_d2``, ten Gaussian points
#: in the plane with Gaussian labels (J = K = 3). Their η keeps ``η h`` of the convex
#: reference's data mode at most 0.42 (the Euler limit is 2, ``solvers.stability``); the 1-D
#: sets take η = 0.2 and the 3-D and 10-point sets 0.1 for longer stages at the same cost.
SETS = {
    "D2": ("skm22_d2.toml", {}, [1e-3, 1e-4], 400.0),
    "D4": ("skm22_d4.toml", {"eta": 0.005}, [1e-3, 1e-4], 400.0),
    "D7": ("skm22_d7.toml", {}, [1e-3, 1e-4], 400.0),
    "D12": ("skm22_d12.toml", {}, [1e-3, 1e-4], 400.0),
    "plane8": ("plane8.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
    "two_point_even": ("two_point_even.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
    "two_point_odd": ("two_point_odd.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
    "zero_d1": (_generated({"kind": "gaussian", "n": 6, "d": 1, "seed": 1}, 0.28), {},
                [1e-2, 1e-3, 1e-4], 6000.0),
    "zero_d2": (_generated({"kind": "gaussian", "n": 6, "d": 2, "seed": 1}, 0.32), {},
                [1e-2, 1e-3, 1e-4], 6000.0),
    "nine_1d": (_generated(NINE_1D, 0.01, eta=0.2), {}, [1e-3, 1e-4], 120000.0),
    "six_1d": (_generated(SIX_1D, 0.01, eta=0.2), {}, [1e-3, 1e-4], 120000.0),
    "gauss8_d3": (_generated({"kind": "gaussian", "n": 8, "d": 3, "seed": 0}, 0.05, eta=0.1),
                  {}, [1e-2, 1e-3, 1e-4], 24000.0),
    "gauss10_d2": (_generated({"kind": "gaussian", "n": 10, "d": 2, "seed": 0}, 0.05,
                              eta=0.1), {}, [1e-2, 1e-3, 1e-4], 24000.0),
}
#: Six and ten random points in the plane (uniform on [−1, 1]², Gaussian labels, λ = 0.01)
#: whose convex limit has a light ray next to a heavy one of the same sign: ``plane6_light``
#: (generator seed 604: convex J = K = 4, a ray of 3.2 % of Σ|c| 0.129 rad from one of 65 %),
#: ``plane10_light`` (seed 191: J = 8, K = 4, a ray of 4.4 % 0.101 rad from one of 34 %);
#: found by :func:`light_ray_sets`, where one-snapshot counts merged such rays.
def _uniform_plane(n: int, seed: int) -> dict:
    import numpy as np
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, 2))
    y = rng.standard_normal(n)
    return {"kind": "inline", "X": [[float(a), float(b)] for a, b in X],
            "y": [float(v) for v in y]}


SETS.update({
    "plane6_light": (_generated(_uniform_plane(6, 604), 0.01, eta=0.1), {},
                     [1e-2, 1e-3, 1e-4], 24000.0),
    "plane10_light": (_generated(_uniform_plane(10, 191), 0.01, eta=0.1), {},
                      [1e-2, 1e-3, 1e-4], 24000.0),
})


def light_ray_sets(n: int, seeds, lam: float = 0.01, light: float = 0.08, heavy: float = 0.1,
                   angle: float = 0.15):
    """Generator seeds of :func:`_uniform_plane` data whose convex limit (weight floor 1 %)
    has a ray of at most ``light`` of ``Σ|c|`` within ``angle`` rad of one of at least
    ``heavy`` of the same sign: ``[(seed, light fraction, heavy fraction, angle)]``."""
    import numpy as np

    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    out = []
    for seed in seeds:
        d = _uniform_plane(n, seed)
        X, y = np.array(d["X"]), np.array(d["y"])
        cc = convex_counts(convex_reference(X, y, lam), X)
        frac = np.abs(cc["weights"]) / np.abs(cc["weights"]).sum()
        for i in range(cc["J"]):
            for j in range(cc["J"]):
                a = float(np.arccos(np.clip(cc["directions"][i] @ cc["directions"][j], -1, 1)))
                if (i != j and cc["signs"][i] == cc["signs"][j] and frac[i] <= light
                        and frac[j] >= heavy and a <= angle):
                    out.append((seed, float(frac[i]), float(frac[j]), a))
    return out


OBSERVATIONS_PER_STAGE = 400
#: ``--auto``: observations over a stage's whole span; a stage that ends at its verdict after
#: ``k`` of its eight chunks has ``k/8`` of them (one chain's verdict needs several hundred
#: effective samples in the stage's second half, docs/theory.md §2.5).
AUTO_OBSERVATIONS_PER_STAGE = 4000
#: The step of the exact sampler (``--integrator mala`` without ``--eta``): its Langevin moves
#: are accepted 0.69–1.00 of the time and its radial moves 0.81–0.98 on every set at every
#: temperature of its ladder (``benchmarks/mala_acceptance.py --eta 0.2`` on the cells'
#: configs, ``N = 1000``; 0.61–1.00 at 0.5).
MALA_ETA = 0.2


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def dump_toml(doc: dict) -> str:
    """A two-level TOML document (tables of scalars and lists)."""
    out = []
    for table, kv in doc.items():
        out.append(f"[{table}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
        out.append("")
    return "\n".join(out)


def cell_config(name: str, N: int, seed: int, span_scale: float = 1.0,
                integrator: str | None = None, chains: int = 1,
                eta: float | None = None, auto: bool = False,
                auto_steps: int | None = None, fine: float | None = None,
                exchange: float | None = None) -> dict:
    """The config of one cell: the shipped one with the shortened ladder (stage length
    ``span_scale`` times the default span of mean-field time), and ``integrator`` (default
    the config's), ``chains`` independent chains and the step ``eta`` when given (the
    stage keeps its span of mean-field time: ``span/eta`` steps; with ``integrator = "mala"``
    and no ``eta``, :data:`MALA_ETA`). ``auto``: every stage runs until its
    stationarity verdict, at most ``auto_steps`` steps (default: the span;
    ``steps_per_tau = "auto"``), observed :data:`AUTO_OBSERVATIONS_PER_STAGE` times over
    that. ``fine``: the share of fine Langevin steps (``dynamics.fine``, ``"mala"`` only;
    default the config's own); ``exchange``: the probability of an exchange move per pass
    (``dynamics.exchange``, likewise)."""
    base, over, taus, span = SETS[name]
    span *= span_scale
    if isinstance(base, dict):
        doc = copy.deepcopy(base)
    else:
        with open(ROOT / "data" / base, "rb") as fh:
            doc = tomllib.load(fh)
    if doc["data"].get("kind") == "file":
        doc["data"]["path"] = str(ROOT / "data" / doc["data"]["path"])
    dyn = doc.setdefault("dynamics", {})
    dyn.update(over)
    if integrator is not None:
        dyn["integrator"] = integrator
    for key, what, value in (("fine", "fine steps", fine), ("exchange", "exchange moves",
                                                           exchange)):
        if value is not None:
            if dyn.get("integrator") != "mala":
                raise ValueError(f"{name}: {what} need the exact sampler (integrator "
                                 f"\"mala\"), not {dyn.get('integrator', 'em')!r}")
            dyn[key] = float(value)
        if dyn.get("integrator") != "mala":
            dyn.pop(key, None)          # the shipped configs' sampler keys are "mala"'s alone
    if chains != 1:
        dyn["chains"] = int(chains)
    if eta is None and dyn.get("integrator") == "mala":
        eta = MALA_ETA
    if eta is not None:
        dyn["eta"] = float(eta)
    steps = round(span / float(dyn["eta"]))
    dyn.update({"taus": list(taus), "seed": int(seed)})
    doc.setdefault("model", {})["n_particles"] = int(N)
    if auto:
        cap = max(16, int(auto_steps) if auto_steps else steps)
        dyn.update({"steps_per_tau": "auto", "max_steps_per_tau": cap})
        # four frames per chunk: the rays of a stage are those of its second half's frames,
        # every chain, pooled (docs/theory.md §6.1)
        doc["output"] = {"observe_every": max(1, cap // AUTO_OBSERVATIONS_PER_STAGE),
                         "snapshots_per_tau": min(4, max(1, cap // 8))}
        return doc
    dyn["steps_per_tau"] = steps
    dyn.pop("max_steps_per_tau", None)        # a shipped "auto" ladder's cap: not for fixed stages
    doc["output"] = {"observe_every": max(1, steps // OBSERVATIONS_PER_STAGE),
                     "snapshots_per_tau": 1}
    return doc


def cell_stem(name: str, N: int, seed: int, span_scale: float = 1.0,
              integrator: str | None = None, chains: int = 1, eta: float | None = None,
              auto: bool = False, auto_steps: int | None = None,
              fine: float | None = None, exchange: float | None = None) -> str:
    """File name (no suffix) of a cell's config and run file: every setting that changes the
    run is in it."""
    return (f"{name}-N{N}-s{seed}" + ("" if span_scale == 1 else f"-x{span_scale:g}")
            + ("" if integrator is None else f"-{integrator}")
            + ("" if chains == 1 else f"-c{chains}")
            + ("" if eta is None else f"-eta{eta:g}")
            + ("" if not auto else "-auto" if not auto_steps else f"-auto{int(auto_steps)}")
            + ("" if fine is None else f"-fine{fine:g}")
            + ("" if exchange is None else f"-exch{exchange:g}"))


def ensure_run(workdir: Path, name: str, N: int, seed: int, threads: int,
               span_scale: float = 1.0, integrator: str | None = None,
               chains: int = 1, eta: float | None = None, auto: bool = False,
               auto_steps: int | None = None, fine: float | None = None,
               exchange: float | None = None) -> Path:
    """Run the cell unless its run file exists; returns the run file. The wall time of the
    run is kept next to it (``<stem>.wall_s``)."""
    stem = cell_stem(name, N, seed, span_scale, integrator, chains, eta, auto, auto_steps,
                     fine, exchange)
    out = workdir / f"{stem}.h5"
    if out.exists():
        return out
    cfg = workdir / f"{stem}.toml"
    cfg.write_text(dump_toml(cell_config(name, N, seed, span_scale, integrator, chains, eta,
                                         auto, auto_steps, fine, exchange)))
    t0 = time.time()
    _run_child([sys.executable, "-m", "meanfield", "run", str(cfg), "-o", str(out),
                "--threads", str(threads), "--quiet", "--overwrite"], cwd=workdir)
    wall = time.time() - t0
    (workdir / f"{stem}.wall_s").write_text(f"{wall:.1f}\n")
    sys.stderr.write(f"ran {stem} in {wall:.0f} s\n")
    return out


def run_wall_time(path: Path) -> float | None:
    """Wall time of the run that made ``path`` (seconds), when it was recorded."""
    w = path.with_suffix(".wall_s")
    return float(w.read_text()) if w.exists() else None


#: Interim certificate test of a stage: max|G| ≤ 1 + G_TOL over the particles and
#: |−sign(a) G − 1| ≤ G_TOL on every ray (THEORY §4: exactly 1 at the optimum).
G_TOL = 0.1


def _certified(res) -> bool:
    return (res.G_max is not None and res.G_max <= 1 + G_TOL
            and all(abs(-q.sign * q.G - 1) <= G_TOL for q in res.rays))


def _vec(v) -> str:
    return "(" + ", ".join(f"{x:.3f}" for x in v) + ")"


def ray_objective(rays, X, y, lam) -> float:
    """Objective of the convex problem (THEORY §4) at the measure of the rays.

    ``(1/2n) Σ_j (Σ_k c_k (v_k·x̃_j)_+ − y_j)² + λ Σ_k |c_k|``, with ``rays`` a list of
    :class:`analysis.rays.Ray`, ``X`` (n, d), ``y`` (n,). Equal to the convex optimum when the
    rays form an optimal measure: a count that then differs from the reference's is a second
    optimum (the problem need not have a unique measure), not a counting error."""
    import numpy as np

    from solvers.geometry import lifted
    f = np.zeros(len(y))
    if rays:
        V = np.array([q.direction for q in rays])
        f = np.maximum(lifted(X) @ V.T, 0.0) @ np.array([q.weight for q in rays])
    return float(0.5 * np.mean((f - y) ** 2) + lam * sum(abs(q.weight) for q in rays))


def particle_objective(theta, X, y, lam) -> float:
    """Objective of the convex problem (THEORY §4) at the particles' own measure.

    ``(1/2n) Σ_j (f_N(x_j) − y_j)² + λ (1/N) Σ_i |a_i||u_i|`` with ``f_N`` the particles'
    predictor (:func:`solvers.numpy_model.predict`): the measure ``(1/N) Σ_i δ_{θ_i}`` is a
    feasible point of the problem over measures, so this is at least the optimum, whatever
    the clustering. The rays' measure (:func:`ray_objective`) replaces each ray by its mean
    direction, which misplaces a ray whose particles straddle a data point's boundary
    (measured on D7 with MALA: 11 times the optimum at the rays, 1.003 at the particles)."""
    import numpy as np

    from solvers import numpy_model
    theta = np.asarray(theta, dtype=float)
    f = numpy_model.predict(theta, np.asarray(X, dtype=float))
    tv = float(np.mean(np.abs(theta[:, 0]) * np.linalg.norm(theta[:, 1:], axis=1)))
    return float(0.5 * np.mean((f - np.asarray(y)) ** 2) + lam * tv)


def _extra_ray_note(frame, i, lam, span) -> str:
    """Why measured ray ``i`` of ``frame`` has no convex partner: its certificate and gap
    against the thermal-mass threshold ``ε(τ)`` (THEORY §6.5), the e-fold time of its mass, and
    the other rays on its kink (a ray split at a data point, §6.6)."""
    res = frame.rays
    q = res.rays[i]
    g = -q.sign * q.G
    efold = 1.0 / (lam * abs(1.0 - g)) if g != 1 else float("inf")
    eps = "" if res.gap_threshold is None else f" vs eps(tau) {res.gap_threshold:.4f}"
    note = (f"extra ray {_vec(q.direction)}, sign {q.sign:+d}, mass {q.mass_fraction:.3f}, "
            f"n={q.n_particles}, -sign(a)G={g:.3f} (gap {1 - g:.4f}{eps}): its mass changes at "
            f"rate lam|1-G|, e-fold time {efold:.0f} vs stage span {span:.0f}")
    for kk in frame.kinks:
        others = [j for j in kk.rays if j != i]
        if i in kk.rays and others:
            same = all(res.rays[j].sign == q.sign for j in others)
            note += (f"; on one kink with ray(s) {others} ({'same' if same else 'other'} sign"
                     f"{': a ray split at a data point' if same else ''}, K unchanged)")
    return note


def _missed_ray_note(theta, X, res, cc, j) -> str:
    """Where the particles are that act like convex ray ``j`` on the data (same sign, same
    activation cell, :func:`analysis.ray_linkage.cells`)."""
    import numpy as np

    from analysis.ray_linkage import cells, directions
    V, _, mass = directions(theta)
    v = cc["directions"][j]
    ids = cells(np.r_[np.where(theta[:, 0] >= 0, 1, -1), cc["signs"][j]], np.vstack([V, v]), X)
    same = ids[:-1] == ids[-1]
    ang = np.arccos(np.clip(V[same] @ v, -1, 1))
    rms = float(np.sqrt(np.sum(mass[same] * ang ** 2) / mass[same].sum())) if same.any() \
        else float("nan")
    per = (float(mass[same].mean()) / res.halo_baseline
           if same.any() and res.halo_baseline else float("nan"))
    tot = float(np.abs(cc["all_weights"]).sum())
    return (f"missed convex ray {_vec(v)}, weight {abs(cc['weights'][j]) / tot:.3f} of sum|c|; "
            f"its cell holds {mass[same].sum() / mass.sum():.3f} of the particle mass "
            f"({int(same.sum())} particles, {per:.1f} baselines (d+1)tau/lam each on average) "
            f"at RMS angle {rms:.3f} rad from it")


def _cluster_notes(res, floor) -> list:
    """Heavy clusters the ray finder refused (certificate, thermal mass, too few particles),
    rays joined across data points and rays of one sign sharing a cell."""
    notes = [f"cluster {_vec(c['direction'])}, sign {c['sign']:+d}, mass "
             f"{c['mass_fraction']:.3f} refused by the certificate: -sign(a)G = "
             f"{-c['sign'] * c['G']:.3f}" for c in res.rejected if c["mass_fraction"] >= floor]
    for c in res.thermal:
        if c["mass_fraction"] >= floor:
            gap = "—" if c["gap"] is None else f"{c['gap']:.4f}"
            notes.append(f"thermal mass {_vec(c['direction'])}, sign {c['sign']:+d}, mass "
                         f"{c['mass_fraction']:.3f}, weight {c['weight']:.4f}, gap {gap} vs "
                         f"eps(tau) {c['gap_threshold']:.4f} ({c['reason']}): not counted")
    notes += [f"ray {m['ray']} joined from {m['parts']} parts across data point(s) "
              f"{m['data_points']}" for m in res.merged]
    notes += [f"rays {k} and {l} of one sign share an activation cell (a split ray or an "
              f"unsettled stage)" for k, l in res.cell_conflicts]
    return notes


def analyse_cell(path: Path, name: str, N: int, seed: int, with_sensitivity: bool = False,
                 gibbs: bool = False) -> dict:
    """``J``, ``K`` at the coldest stationary stage of a run against the convex counts, with
    the quantities that explain a disagreement.

    ``J``, ``K``, the convex counts and the matching are those of ``meanfield analyze``
    (:func:`analysis.run_analysis.analyze` with the convex counts). A stage counts as
    stationary when the analysis judges it so (``analysis.stationarity.run_verdicts``, the
    verdict ``meanfield analyze`` prints) and its certificate is that of a stationary state
    (:data:`G_TOL`). ``gibbs``: also, per stage, the pooled counts against the exact Gibbs
    measure's (``J_gibbs``, ``K_gibbs``, docs/theory.md §6.7), with the single snapshots'
    range (``stages``)."""
    import numpy as np

    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from analysis.run_analysis import analyze
    from analysis.snapshots import last_of_stages
    from meanfield.store import open_run
    t0 = time.time()
    run = open_run(path)
    taus, lam = run.taus, run.lam
    result = analyze(run, w2=False, convex=True, references=gibbs)
    rows = {r.stage: r for r in result.ladder}
    frames = {f.stage: f for f in last_of_stages(result.frames)}
    verdicts = result.verdicts
    stat = [s for s in sorted(rows) if rows[s].stationary and _certified(frames[s].rays)]
    cold = run.schedule.coldest_stage()
    stage = max(stat, key=lambda s: -taus[s]) if stat else cold
    row, frame = rows[stage], frames[stage]
    res = frame.rays
    span = run.steps_run(stage) * run.eta
    conv = convex_reference(run.X, run.y, lam)
    cc = {**convex_counts(conv, run.X), "all_weights": conv.weights}
    objective_gap = (ray_objective(res.rays, run.X, run.y, lam) - conv.primal) / conv.primal
    particle_gap = (particle_objective(frame.theta, run.X, run.y, lam) - conv.primal) / conv.primal
    notes = [_extra_ray_note(frame, i, lam, span) for i in row.unmatched_measured]
    notes += [_missed_ray_note(frame.theta, run.X, res, cc, j) for j in row.unmatched_reference]
    agree = row.J == cc["J"] and row.K == cc["K"] and row.matched == cc["J"]
    if not agree:
        notes += _cluster_notes(res, cc["floor"])
    tot = float(np.abs(conv.weights).sum())
    below = [float(abs(w) / tot) for w in conv.weights if abs(w) < cc["floor"] * tot]
    if below and (row.J != cc["J"] or row.unmatched_measured):
        notes.append("convex rays below the floor: weights "
                     + ", ".join(f"{w:.4f}" for w in below) + " of sum|c|")
    if stage in stat and stage != cold:
        rc = frames[cold].rays
        notes.append(f"coldest stage tau={taus[cold]:g} (J={rows[cold].J}, K={rows[cold].K}, "
                     f"{rows[cold].matched} matched) not stationary: "
                     f"{'; '.join(verdicts[cold].reasons) or 'certificate'}, max|G| "
                     f"{rc.G_max:.3f}, rays' -sign(a)G "
                     + ", ".join(f"{-q.sign * q.G:.3f}" for q in rc.rays))
    if stage not in stat:
        notes.append(f"no stage stationary; coldest tau={taus[stage]:g}: "
                     f"{'; '.join(verdicts[stage].reasons) or 'certificate'}, max|G| "
                     f"{res.G_max:.3f}, rays' -sign(a)G "
                     + ", ".join(f"{-q.sign * q.G:.3f}" for q in res.rays))
    if not res.resolved:
        notes.append(f"N too small: {len(res.small)} heavy cluster(s) under "
                     f"{res.min_particles} particles, the heaviest "
                     + ", ".join(f"{_vec(c['direction'])} sign {c['sign']:+d} mass "
                                 f"{c['mass_fraction']:.3f} in {c['n_particles']} particle(s)"
                                 for c in sorted(res.small, key=lambda c: -c["mass_fraction"])[:2]))
    if not agree and abs(objective_gap) < 1e-3:
        notes.append(f"the rays' measure is optimal to {objective_gap:.1e} of the convex "
                     "objective: another optimum of the convex problem (non-unique measure)")
    at_gibbs = (not agree and row.J_gibbs is not None
                and (row.J, row.K) == (row.J_gibbs, row.K_gibbs))
    if at_gibbs:
        notes.append(f"the exact Gibbs measure at tau={taus[stage]:g} has the particles' counts "
                     f"(J, K = {row.J_gibbs}, {row.K_gibbs}): the difference from the convex "
                     "limit is the temperature's, not the particles'")
    if row.K != cc["K"] and not notes:
        notes.append("K differs: kinks " + "; ".join(_vec(q.direction) for q in res.rays))
    sens = None
    if with_sensitivity:
        from analysis.ray_checks import sensitivity
        sens = sensitivity(frame.theta, run.X, frame.ray_kw, conv=conv)
    return {"set": name, "N": N, "seed": seed, "tau": taus[stage],
            "stationary": stage in stat,
            "stationary_stages": [taus[s] for s in stat], "J": row.J, "K": row.K,
            "J_convex": cc["J"], "K_convex": cc["K"], "matched": row.matched,
            "max_angle": row.max_match_angle, "G_max": res.G_max, "resolved": res.resolved,
            "thermal": len(res.thermal), "merged": len(res.merged),
            "objective_gap": objective_gap, "particle_gap": particle_gap, "agree": agree,
            "gibbs_at_coldest": at_gibbs, "notes": notes,
            "sensitivity": sens, "analysis_s": time.time() - t0,
            "J_frames": row.J_frames, "K_frames": row.K_frames,
            "stages": [{"tau": r.tau, "stationary": bool(r.stationary), "J": r.J, "K": r.K,
                        "J_frames": r.J_frames, "K_frames": r.K_frames, "J_gibbs": r.J_gibbs,
                        "K_gibbs": r.K_gibbs, "gibbs_matched": r.gibbs_matched,
                        "gibbs_note": r.gibbs_note} for r in result.ladder]}


def _dash(v) -> str:
    return "—" if v is None else str(v)


def _gap(v) -> str:
    return "—" if v is None else f"{v:.1e}"         # rows of JSON files made before the column


def format_table(rows) -> str:
    """The rows as a Markdown table, disagreements explained below it.

    ``thermal``: clusters refused as thermal mass (THEORY §6.5); ``objective gap``: the convex
    objective at the rays' measure relative to the optimum (:func:`ray_objective`), ``particle
    gap`` at the particles' measure (:func:`particle_objective`; the one to read for
    near-optimality, the rays' summary misplaces rays that straddle a kink); ``run s``:
    wall time of the run (— for a run file reused)."""
    head = ("| set | N | seed | τ | stationary | J | K | J convex | K convex | matched | "
            "max angle | thermal | objective gap | particle gap | agree | run s |")
    L = [head, "|" + "---|" * 16]
    for r in rows:
        ang = "—" if r["max_angle"] is None else f"{r['max_angle']:.3f}"
        run_s = "—" if r.get("run_s") is None else f"{r['run_s']:.0f}"
        L.append(f"| {r['set']} | {r['N']} | {r['seed']} | {r['tau']:.0e} | "
                 f"{'yes' if r['stationary'] else 'no'} | {r['J']} | {r['K']} | "
                 f"{r['J_convex']} | {r['K_convex']} | {r['matched']} | {ang} | "
                 f"{r['thermal']} | {r['objective_gap']:.1e} | "
                 f"{_gap(r.get('particle_gap'))} | "
                 f"{'yes' if r['agree'] else '**no**'} | {run_s} |")
    def rng(v):
        return "—" if not v else (f"{min(v)}" if min(v) == max(v) else f"{min(v)}–{max(v)}")
    if any(st.get("J_gibbs") is not None for r in rows for st in r.get("stages") or []):
        L += ["", "Pooled counts against the exact Gibbs measure's at every stage (one "
              "snapshot: the range of single snapshots' counts):", "",
              "| set | N | seed | τ | stationary | J (one snapshot) | K (one snapshot) | "
              "J Gibbs | K Gibbs | matched | agree | note |", "|" + "---|" * 12]
        for r in rows:
            for st in r.get("stages") or []:
                ok = (st["J"], st["K"]) == (st["J_gibbs"], st["K_gibbs"])
                L.append(f"| {r['set']} | {r['N']} | {r['seed']} | {st['tau']:.0e} | "
                         f"{'yes' if st['stationary'] else 'no'} | {st['J']} "
                         f"({rng(st['J_frames'])}) | {st['K']} ({rng(st['K_frames'])}) | "
                         f"{_dash(st['J_gibbs'])} | {_dash(st['K_gibbs'])} | "
                         f"{_dash(st['gibbs_matched'])} | "
                         f"{'—' if st['J_gibbs'] is None else 'yes' if ok else '**no**'} | "
                         f"{st['gibbs_note'] or ''} |")
    bad = [r for r in rows if not r["agree"] or r["notes"]]
    if bad:
        L += ["", "Notes:"]
        for r in bad:
            L.append(f"- {r['set']} N={r['N']} seed={r['seed']}: " + "; ".join(r["notes"]))
    for r in rows:
        if r.get("sensitivity"):
            sens = r["sensitivity"]
            title = (f"Sensitivity, {r['set']} N={r['N']} seed={r['seed']} tau={r['tau']:g} "
                     f"(defaults J={sens['default']['J']}, K={sens['default']['K']}; "
                     f"robust: {sens['robust']}):")
            L += ["", title, "", "| threshold | values | J | K |", "|---|---|---|---|"]
            names = list(dict.fromkeys(x["threshold"] for x in sens["rows"]))
            for nm in names:
                xs = [x for x in sens["rows"] if x["threshold"] == nm]
                vals = " / ".join(format(x["value"], ".3g") for x in xs)
                Js = " / ".join(str(x["J"]) for x in xs)
                Ks = " / ".join(str(x["K"]) for x in xs)
                L.append(f"| {nm} | {vals} | {Js} | {Ks} |")
    return "\n".join(L)


def _run_child(cmd, cwd) -> None:
    """``subprocess.run(cmd, check=True)`` whose child a SIGTERM of this script takes with it.

    SIGTERM is held while the child starts: raised inside ``Popen`` (between the child's exec
    and the parent's return, a window a loaded machine widens), the KeyboardInterrupt of
    :func:`_interrupt` left the started child running, since ``subprocess.run`` kills only a
    child whose ``Popen`` returned. The child itself starts with the signal unblocked.

    Raises
    ------
    subprocess.CalledProcessError
        The child's exit status was not 0.
    """
    held = {signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        child = subprocess.Popen(cmd, cwd=cwd, env=package_env(), stdout=subprocess.DEVNULL,
                                 preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK,
                                                                           held))
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)    # a SIGTERM held meanwhile: here
        code = child.wait()
    except BaseException:
        child.kill()
        child.wait()
        raise
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def _interrupt(signum, frame):
    """SIGTERM as Ctrl-C: ``subprocess.run`` then stops the cell's ``meanfield run`` (left
    running, detached, when the script was killed), whose run file is redone next time."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--N", nargs="+", type=int, default=[500, 1000, 4000])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--workdir", default="ray_counts_runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--span-scale", type=float, default=1.0,
                    help="stage length in units of the default span of mean-field time")
    ap.add_argument("--integrator", choices=["em", "lm", "mala"], default=None,
                    help="override the configs' integrator (default: each config's own)")
    ap.add_argument("--chains", type=int, default=1,
                    help="independent chains per cell (dynamics.chains; default 1)")
    ap.add_argument("--eta", type=float, default=None,
                    help="override the configs' step (default: each config's own; the "
                         "exact sampler is not bound by Euler's stability limit)")
    ap.add_argument("--auto", action="store_true",
                    help="every stage runs until its stationarity verdict, at most the span "
                         "(steps_per_tau = \"auto\"), observed more often")
    ap.add_argument("--auto-steps", type=int, default=None,
                    help="with --auto: the most steps of a stage, for every set (default: the "
                         "set's span)")
    ap.add_argument("--fine", type=float, default=None,
                    help="with the exact sampler: the share of fine Langevin steps "
                         "(dynamics.fine, in [0, 1]; default each config's own: 0.5 in the "
                         "shipped configs, none in the sets built here; the sets built "
                         "here run Euler unless --integrator mala)")
    ap.add_argument("--exchange", type=float, default=None,
                    help="with the exact sampler: the probability that a pass ends with an "
                         "exchange move of the stiff cells' masses (dynamics.exchange, in "
                         "[0, 1]; default each config's own: none)")
    ap.add_argument("--runs-only", action="store_true", help="make the run files, no table")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also J and K over a range of each threshold, per cell")
    ap.add_argument("--gibbs", action="store_true",
                    help="also the exact Gibbs measure's rays at every stage (d <= 5)")
    args = ap.parse_args(argv)
    if args.auto_steps is not None and (not args.auto or args.auto_steps < 16):
        ap.error("--auto-steps needs --auto and at least 16 steps")
    for opt, value in (("--fine", args.fine), ("--exchange", args.exchange)):
        if value is None:
            continue
        if not 0 <= value <= 1:
            ap.error(f"{opt} is a share in [0, 1]")
        for name in args.sets:      # before any cell runs, not after hours of the others
            try:
                cell_config(name, 10, 0, integrator=args.integrator, fine=args.fine,
                            exchange=args.exchange)
            except ValueError as exc:
                ap.error(f"{opt}: {exc} (give --integrator mala)")
    # a killed script takes its run with it (the caller's handler is back on return; only
    # the main thread may set one)
    if threading.current_thread() is not threading.main_thread():
        return _run_cells(args)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run_cells(args)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _run_cells(args) -> int:
    """The cells of the parsed ``args``: their runs, then the table."""
    workdir = Path(args.workdir).resolve()     # the runs start in the checkout
    workdir.mkdir(parents=True, exist_ok=True)
    # cheapest cells first: by N, then seed, then set
    cells = [(name, N, seed) for N in sorted(args.N) for seed in args.seeds for name in args.sets]
    runs = {c: ensure_run(workdir, *c, args.threads, args.span_scale, args.integrator,
                          args.chains, args.eta, args.auto, args.auto_steps, args.fine,
                          args.exchange)
            for c in cells}
    if args.runs_only:
        return 0
    rows = [{**analyse_cell(path, *cell, with_sensitivity=args.sensitivity, gibbs=args.gibbs),
             "run_s": run_wall_time(path)} for cell, path in runs.items()]
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
