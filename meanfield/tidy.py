"""Tidy views of runs, analyses and studies: an ``xarray.Dataset`` of a run file, one pandas
table per analysis result (one row per temperature, ray or kink hyperplane), and a study's
results over its grid. Only committed rows ever appear (they come through
:func:`meanfield.store.open_run`).

xarray and pandas load on first use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def run_dataset(run, frames: bool = True):
    """A run as an ``xarray.Dataset``.

    Parameters
    ----------
    run : meanfield.store.Run
        An open run file (complete or in progress: its committed rows).
    frames : bool
        Load the snapshot frames (``F · N · (d+2)`` float64 values) into ``particles``.

    Returns
    -------
    xarray.Dataset
        Observables over dimensions ``chain`` and ``time`` (coordinates ``chain``, ``time =
        step · eta``, ``step``, ``tau``, ``stage``, ``step_in_stage``): ``risk``,
        ``regulariser``, ``mean_sq_norm``, ``stationarity`` and ``residuals`` (``chain``,
        ``time``, ``sample``). Frames over ``chain``, ``frame``, ``particle``, ``coord``
        (``coord`` = ``a, w1..wd, b``; coordinates ``frame_step``, ``frame_time``,
        ``frame_tau``, ``frame_stage``, ``frame_step_in_stage``): ``particles``. The
        ``chain`` dimension has one entry per independent particle system
        (``dynamics.chains``; length 1 for a run of one chain, so that a script reads every
        run alike, e.g. ``ds.risk.mean("chain")``, ``ds.risk.sel(chain=0)``); the ladder
        coordinates are shared by the chains. The data: ``X`` (``sample``, ``input``) and
        ``y`` (``sample``). Attributes: ``path``, ``complete``, ``lam``, ``eta``,
        ``steps_per_tau`` (an int, or ``"auto"``), ``stage_lengths`` (the steps of each stage
        as run; an ``"auto"`` stage's length is known once it has ended), ``taus``,
        ``n_particles``, ``n_chains``, ``config_json``. The stage of a row is the one the run
        file stores (:attr:`meanfield.store.Run.stage`; ``step_in_stage`` is 1-based), never
        told from its temperature, so auto lengths and ladders that visit a temperature
        twice work.
    """
    import xarray as xr
    dyn = run.config.dynamics
    sch = run.schedule
    obs = run.observables
    chains = run.chains()
    step = obs["risk"]["step"]
    lengths = sch.lengths if sch.auto else [sch.stage_length(k) for k in range(sch.n_stages)]
    coords = {"chain": np.array([c.chain_index for c in chains], dtype=np.int64),
              "time": ("time", obs["risk"]["time"], {"units": "step · eta"}),
              "step": ("time", step), "tau": ("time", obs["tau"]["value"]),
              "stage": ("time", run.stage), "step_in_stage": ("time", run.step_in_stage),
              "sample": np.arange(run.n), "input": [f"x{k + 1}" for k in range(run.d)]}
    data = {name: (("chain", "time"), np.stack([c.observables[name]["value"] for c in chains]))
            for name in ("risk", "regulariser", "mean_sq_norm", "stationarity")}
    data["residuals"] = (("chain", "time", "sample"),
                         np.stack([c.observables["residuals"]["value"].reshape(len(step), run.n)
                                   for c in chains]),
                         {"meaning": "R_j = (f(x_j) - y_j) / n"})
    data["X"] = (("sample", "input"), run.X)
    data["y"] = ("sample", run.y)
    cols = ["a"] + [f"w{k + 1}" for k in range(run.d)] + ["b"]
    coords.update({"frame": np.arange(run.n_frames), "frame_step": ("frame", run.frame_step),
                   "frame_time": ("frame", run.frame_time),
                   "frame_tau": ("frame", run.frame_tau),
                   "frame_stage": ("frame", run.frame_stage),
                   "frame_step_in_stage": ("frame", run.frame_step_in_stage),
                   "coord": cols})
    if frames:
        empty = np.empty((0, run.n_particles, run.d + 2))
        parts = np.stack([np.stack([c.frame(k) for k in range(run.n_frames)])
                          if run.n_frames else empty for c in chains])
        coords["particle"] = np.arange(run.n_particles)
        data["particles"] = (("chain", "frame", "particle", "coord"), parts)
    attrs = {"path": str(run.path), "complete": int(run.complete), "lam": float(dyn.lam),
             "eta": float(dyn.eta), "steps_per_tau": dyn.steps_per_tau,
             "stage_lengths": np.asarray(lengths, dtype=np.int64),
             "taus": np.asarray(dyn.taus, dtype=float), "n_particles": run.n_particles,
             "n_chains": len(chains), "config_json": run.config_json}
    return xr.Dataset(data, coords=coords, attrs=attrs)


# --- analysis results -------------------------------------------------------------------------

#: The minus sign of the Markdown report (U+2212); tables and CSV files use ASCII ``-``.
MINUS = "\u2212"


def _jsonable(value):
    """``value`` with non-finite floats as ``None`` (strict JSON) and U+2212 minus signs in
    strings as ASCII ``-``."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, str):
        return value.replace(MINUS, "-")
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    return value


def _cell(value):
    """One table cell: a nested value (dict, list) as compact JSON text with sorted keys, a
    string with ASCII minus signs, anything else as it is."""
    import json
    if isinstance(value, (dict, list, tuple, np.ndarray)):
        return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
    if isinstance(value, str):
        return value.replace(MINUS, "-")
    return value


def ladder_table(rep):
    """One row per stage of an analysis (``rep["ladder"]``), in ladder order.

    Columns: ``stage, tau, step, J, K, risk, halo_mass_fraction, w2_to_previous, w2_method,
    w2_rays_to_previous, dist_to_reference`` and, where the report has them, the convex counts
    and ray matching, ``stationary``, ``stationarity`` and the
    bounds ``bound_2P_minus_1``, ``bound_P_minus_1``. One value per cell: nested values (the
    ``stationarity`` verdict, a dict; the index lists ``unmatched_measured`` and
    ``unmatched_reference``) are JSON text (sorted keys, ``null`` for NaN), minus signs ASCII.
    """
    import pandas as pd

    from analysis.run_analysis import upgrade_report
    rep = upgrade_report(rep)           # a report of any version (J, K integers)
    df = pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in rep["ladder"]])
    if len(df):
        df["bound_2P_minus_1"] = rep.get("bound_2P_minus_1")
        df["bound_P_minus_1"] = rep.get("bound_P_minus_1")
    return df


def _last_of_stages(rep):
    from analysis.snapshots import last_of_stages
    return last_of_stages(rep.get("snapshots", []))


def rays_table(rep, all_frames: bool = False):
    """One row per ray: ``stage, tau, step, ray`` (index, by decreasing mass), ``sign``, ``weight``,
    ``mass_fraction``, ``spread`` (rad), ``n_particles``, ``n_cells``, ``G``,
    ``pattern_margin``, ``pattern`` (``+0-`` string, ASCII: one character per training point,
    whether the ray's hyperplane passes above, through or below it), ``v1..v{d+1}`` (the unit
    direction of ``(w, b)``). The last snapshot of each stage, or every snapshot
    (``all_frames``)."""
    import pandas as pd
    rows = []
    for s in (rep.get("snapshots", []) if all_frames else _last_of_stages(rep)):
        for i, r in enumerate(s["rays"]):
            row = {"stage": s["stage"], "tau": s["tau"], "step": s["step"], "ray": i}
            row.update({k: r[k] for k in ("sign", "weight", "mass_fraction", "spread",
                                          "n_particles", "n_cells", "G", "pattern_margin")})
            row["pattern"] = "".join({1: "+", 0: "0", -1: "-"}[int(t)] for t in r["pattern"])
            row.update({f"v{k + 1}": x for k, x in enumerate(r["direction"])})
            rows.append(row)
    return pd.DataFrame(rows)


def kinks_table(rep, all_frames: bool = False):
    """The kink hyperplanes ``{x : normal·x = offset}`` in long format: one row per
    hyperplane and ray on it, ``stage, tau, step, hyperplane, offset, n1..nd`` (unit normal; the same
    on every row of a hyperplane), ``ray`` (index of the ray, as in :func:`rays_table`) and
    ``sign`` (``+1``/``-1``, the sign of ``a`` of that ray). A hyperplane without rays has one
    row with ``ray`` and ``sign`` empty. The hyperplanes of a stage are the distinct
    ``hyperplane`` values of its rows."""
    import pandas as pd
    rows = []
    for s in (rep.get("snapshots", []) if all_frames else _last_of_stages(rep)):
        for i, kk in enumerate(s["kinks"]):
            base = {"stage": s["stage"], "tau": s["tau"], "step": s["step"], "hyperplane": i,
                    "offset": kk["offset"]}
            base.update({f"n{k + 1}": x for k, x in enumerate(kk["normal"])})
            on = [(int(r), 1 if s["rays"][r]["sign"] > 0 else -1) for r in kk["rays"]]
            for r, sign in on or [(None, None)]:
                rows.append({**base, "ray": r, "sign": sign})
    df = pd.DataFrame(rows)
    if len(df):
        df["ray"] = df["ray"].astype("Int64")
        df["sign"] = df["sign"].astype("Int64")
    return df


#: The tables of an analysis, by name (``Report.to_dataframe(name)``).
REPORT_TABLES = {"ladder": ladder_table, "rays": rays_table, "kinks": kinks_table}
#: CSV files written by ``meanfield analyze --csv``, and their tables.
CSV_TABLES = {f"{name}.csv": table for name, table in REPORT_TABLES.items()}


def write_csv(rep, outdir) -> list:
    """Write ``ladder.csv``, ``rays.csv`` and ``kinks.csv`` of an analysis into ``outdir``
    (each through a temporary file and a rename); returns the paths. UTF-8, one value per cell,
    ASCII minus signs (the tables of :data:`REPORT_TABLES`)."""
    import os
    out = Path(outdir)
    written = []
    for name, table in CSV_TABLES.items():
        tmp = out / (name + ".tmp")
        table(rep).to_csv(tmp, index=False, encoding="utf-8")
        os.replace(tmp, out / name)
        written.append(out / name)
    return written


# --- studies ----------------------------------------------------------------------------------

def _dim_names(axes) -> dict:
    """Dimension name of each dotted sweep axis: its last part (``model.n_particles`` ->
    ``n_particles``), the full name where two axes would share one."""
    short = {a: a.split(".")[-1] for a in axes}
    counts = {}
    for s in short.values():
        counts[s] = counts.get(s, 0) + 1
    return {a: (s if counts[s] == 1 else a) for a, s in short.items()}


def study_dataset(arrays):
    """A study's results (:class:`meanfield.sweep.summary.StudyArrays`) as an ``xarray.Dataset``.

    Dimensions: one per sweep axis, named after it (``dynamics.seed`` -> ``seed``,
    ``model.n_particles`` -> ``n_particles``; the dotted name in the coordinate's ``axis``
    attribute), and ``stage`` (the ladder's stages in order, with their temperature as the
    coordinate ``tau`` along it: ``ds.sel(stage=1)``, or ``ds.swap_dims(stage="tau")`` for a
    ladder that visits each temperature once; see :class:`meanfield.sweep.summary.StudyArrays`).
    Variables: ``risk``, ``J`` (rays), ``K`` (kink hyperplanes) over the axes and ``stage``
    (``nan`` where a run is not done or lacks that stage); ``status`` and ``run_file`` over the
    axes.
    """
    import xarray as xr
    names = _dim_names(arrays.axes)
    dims = [names[a] for a in arrays.axes]
    coords = {names[a]: (names[a], _coord(v), {"axis": a}) for a, v in arrays.axes.items()}
    coords["stage"] = ("stage", np.asarray(arrays.stages, dtype=np.int64))
    coords["tau"] = ("stage", np.asarray(arrays.taus, dtype=float))
    grid = tuple(dims)
    data = {"risk": (grid + ("stage",), arrays.risk),
            "J": (grid + ("stage",), arrays.n_rays, {"meaning": "rays"}),
            "K": (grid + ("stage",), arrays.n_hyperplanes, {"meaning": "kink hyperplanes"}),
            "status": (grid, arrays.status), "run_file": (grid, arrays.run_files)}
    return xr.Dataset(data, coords=coords)


def _coord(values):
    """Axis values as a coordinate: numbers stay numbers, anything else becomes its string."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.asarray(values)
    return np.asarray([v if isinstance(v, str) else repr(v) for v in values], dtype=object)
