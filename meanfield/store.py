"""HDF5 run files (H5MD 1.1 layout); the only module that touches run files.

Layout (documented in ``docs/format.md``)::

    /h5md                         attrs version=[1, 1]; groups author (name), creator (name, version)
    /parameters                   attrs schema_version, config_json, config_hash, physics_hash,
                                  lam, eta, taus, n_particles, d, n, seed, activation, provenance
    /data/X (n, d), /data/y (n,)  the training set
    /particles/neurons/box        attrs dimension = d+2, boundary = ['none'] * (d+2)
    /particles/neurons/position/{step (F,), time (F,), value (F, N, d+2)}   rows (a, w_1..w_d, b)
    /particles/neurons/temperature/{step, time, value (F,)}                 tau of each frame
    /observables/<name>/{step (M,), time (M,), value (M, ...)}
        tau, risk, regulariser, mean_sq_norm, residuals (M, n), stationarity
    root attrs  n_frames, n_observations (commit counters, written last), complete (bool)

Readers trust only the first ``n_frames`` / ``n_observations`` rows, so a killed writer leaves a
readable file holding every committed row.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from meanfield.errors import RunFileError

SCHEMA_VERSION = 1
CREATOR = "meanfield"
OBSERVABLES = ("tau", "risk", "regulariser", "mean_sq_norm", "stationarity", "residuals")


def _h5py():
    import h5py
    return h5py


def provenance() -> dict:
    """Versions of the package and its numerical dependencies, and the git commit if any."""
    import numba
    import numpy
    import scipy
    from meanfield._version import __version__
    info = {"meanfield": __version__, "numpy": numpy.__version__, "numba": numba.__version__,
            "scipy": scipy.__version__, "h5py": _h5py().__version__,
            "python": platform.python_version()}
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        if out.returncode == 0:
            info["git_commit"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _time_element(group, name, value_shape, dtype=np.float64, chunk_rows=64):
    g = group.create_group(name)
    g.create_dataset("step", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(chunk_rows,))
    g.create_dataset("time", shape=(0,), maxshape=(None,), dtype=np.float64, chunks=(chunk_rows,))
    g.create_dataset("value", shape=(0,) + tuple(value_shape), maxshape=(None,) + tuple(value_shape),
                     dtype=dtype, chunks=(chunk_rows if not value_shape else
                                          max(1, min(chunk_rows, 2**20 // (8 * int(np.prod(value_shape))))),)
                     + tuple(value_shape))
    return g


def _append(g, steps, times, values):
    k = len(steps)
    m = g["step"].shape[0]
    for name, arr in (("step", steps), ("time", times), ("value", values)):
        ds = g[name]
        ds.resize(m + k, axis=0)
        ds[m:m + k] = arr


class RunWriter:
    """Writes one run file; flushes after every append and bumps the commit counters last.

    Parameters
    ----------
    path : path-like
        The run file. Created (``mode="w"``) or reopened for appending (``mode="a"``).
    cfg : meanfield.config.RunConfig
        Needed when creating.
    dataset : meanfield.data.Dataset
        Needed when creating.
    """

    def __init__(self, path, cfg=None, dataset=None, mode="w"):
        h5py = _h5py()
        self.path = Path(path)
        if mode == "w":
            self.f = h5py.File(self.path, "w", libver=("earliest", "v110"))
            self._create(cfg, dataset)
        elif mode == "a":
            self.f = h5py.File(self.path, "a")
            check_schema(self.f, str(self.path))
        else:  # pragma: no cover
            raise ValueError(mode)

    def _create(self, cfg, dataset):
        f = self.f
        d, n, N = dataset.d, dataset.n, cfg.n_particles
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h.create_group("author").attrs["name"] = os.environ.get("USER", "unknown")
        cr = h.create_group("creator")
        prov = provenance()
        cr.attrs["name"] = CREATOR
        cr.attrs["version"] = prov["meanfield"] + (f"+{prov['git_commit'][:12]}"
                                                   if "git_commit" in prov else "")
        p = f.create_group("parameters")
        p.attrs["schema_version"] = SCHEMA_VERSION
        p.attrs["config_json"] = cfg.canonical_json()
        p.attrs["config_hash"] = cfg.hash()
        p.attrs["physics_hash"] = cfg.physics_hash()
        p.attrs["lam"] = cfg.dynamics["lam"]
        p.attrs["eta"] = cfg.dynamics["eta"]
        p.attrs["taus"] = np.asarray(cfg.taus, dtype=np.float64)
        p.attrs["steps_per_tau"] = cfg.dynamics["steps_per_tau"]
        p.attrs["n_particles"] = N
        p.attrs["d"] = d
        p.attrs["n"] = n
        p.attrs["seed"] = cfg.dynamics["seed"]
        p.attrs["activation"] = cfg.model["activation"]
        p.attrs["provenance"] = json.dumps(prov, sort_keys=True)
        g = f.create_group("data")
        g.create_dataset("X", data=dataset.X)
        g.create_dataset("y", data=dataset.y)
        g.attrs["name"] = dataset.name
        neu = f.create_group("particles").create_group("neurons")
        box = neu.create_group("box")
        box.attrs["dimension"] = d + 2
        box.attrs["boundary"] = np.array(["none"] * (d + 2), dtype="S4")
        pos = _time_element(neu, "position", (N, d + 2), chunk_rows=1)
        pos["value"].attrs["columns"] = "a," + ",".join(f"w{k + 1}" for k in range(d)) + ",b"
        _time_element(neu, "temperature", ())
        obs = f.create_group("observables")
        for name in OBSERVABLES:
            _time_element(obs, name, (n,) if name == "residuals" else ())
        f.attrs["n_frames"] = 0
        f.attrs["n_observations"] = 0
        f.attrs["complete"] = False
        f.flush()

    def append_frame(self, theta, step, time, tau):
        """Append one snapshot frame ``theta`` (N, d+2) at ``step``/``time`` and temperature ``tau``."""
        neu = self.f["particles/neurons"]
        _append(neu["position"], [step], [time], np.asarray(theta)[None])
        _append(neu["temperature"], [step], [time], [tau])
        self.f.flush()
        self.f.attrs["n_frames"] = neu["position/step"].shape[0]
        self.f.flush()

    def append_observations(self, rows):
        """Append observations: a list of dicts with keys ``step``, ``time`` and
        :data:`OBSERVABLES`."""
        if not rows:
            return
        obs = self.f["observables"]
        steps = [r["step"] for r in rows]
        times = [r["time"] for r in rows]
        for name in OBSERVABLES:
            _append(obs[name], steps, times, np.asarray([r[name] for r in rows]))
        self.f.flush()
        self.f.attrs["n_observations"] = obs["risk/step"].shape[0]
        self.f.flush()

    def truncate(self, n_frames, n_observations):
        """Drop rows beyond the given counts (used when resuming from a checkpoint)."""
        neu = self.f["particles/neurons"]
        for g in (neu["position"], neu["temperature"]):
            for k in ("step", "time", "value"):
                g[k].resize(n_frames, axis=0)
        for name in OBSERVABLES:
            for k in ("step", "time", "value"):
                self.f["observables"][name][k].resize(n_observations, axis=0)
        self.f.attrs["n_frames"] = n_frames
        self.f.attrs["n_observations"] = n_observations
        self.f.attrs["complete"] = False
        self.f.flush()

    def mark_complete(self):
        self.f.attrs["complete"] = True
        self.f.flush()

    def close(self):
        if getattr(self, "f", None) is not None:
            self.f.close()
            self.f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_schema(f, source):
    """Raise :class:`RunFileError` unless ``f`` is a meanfield run file of a supported schema."""
    if "h5md" not in f or "parameters" not in f:
        raise RunFileError(source, "", "not a meanfield run file (no /h5md or /parameters group)")
    v = f["parameters"].attrs.get("schema_version")
    if v is None:
        raise RunFileError(source, "parameters.schema_version", "missing")
    if int(v) > SCHEMA_VERSION:
        raise RunFileError(source, "parameters.schema_version",
                           f"version {int(v)} is newer than this meanfield supports "
                           f"({SCHEMA_VERSION}); upgrade meanfield")
    if int(v) < 1:
        raise RunFileError(source, "parameters.schema_version", f"unknown version {int(v)}")


@dataclass
class Run:
    """A run file read into memory (all committed rows).

    Attributes
    ----------
    path : str
    config : dict              the canonical config
    X : ndarray (n, d); y : ndarray (n,)
    frame_step : ndarray (F,) int; frame_time : ndarray (F,); frame_tau : ndarray (F,)
    observables : dict of name -> dict(step, time, value)
    complete : bool            the run reached the end of its ladder
    """

    path: str
    config: dict
    config_json: str
    X: np.ndarray
    y: np.ndarray
    frame_step: np.ndarray
    frame_time: np.ndarray
    frame_tau: np.ndarray
    observables: dict
    complete: bool
    provenance: dict
    schema_version: int

    @property
    def n(self):
        return int(self.X.shape[0])

    @property
    def d(self):
        return int(self.X.shape[1])

    @property
    def n_frames(self):
        return int(self.frame_step.shape[0])

    @property
    def n_particles(self):
        return int(self.config["model"]["n_particles"])

    def frame(self, k):
        """Particles of frame ``k``: ndarray of shape (N, d+2), rows (a, w, b)."""
        h5py = _h5py()
        if not -self.n_frames <= k < self.n_frames:
            raise IndexError(f"frame {k} out of range ({self.n_frames} frames)")
        k %= self.n_frames
        with h5py.File(self.path, "r") as f:
            return np.asarray(f["particles/neurons/position/value"][k])


def open_run(path) -> Run:
    """Read a run file's metadata, data, frame index and observables.

    Raises
    ------
    RunFileError
        Missing, unreadable, truncated or foreign file, or a newer schema version.
    """
    h5py = _h5py()
    src = str(path)
    if not Path(path).exists():
        raise RunFileError(src, "", "no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise RunFileError(src, "", f"not a readable HDF5 file ({str(exc).split('(')[0].strip()})") from None
    try:
        with f:
            check_schema(f, src)
            p = f["parameters"]
            cfg_json = str(p.attrs["config_json"])
            nf = int(f.attrs.get("n_frames", 0))
            no = int(f.attrs.get("n_observations", 0))
            pos = f["particles/neurons/position"]
            obs = {}
            for name in OBSERVABLES:
                g = f["observables"][name]
                obs[name] = {k: np.asarray(g[k][:no]) for k in ("step", "time", "value")}
            return Run(path=src, config=json.loads(cfg_json), config_json=cfg_json,
                       X=np.asarray(f["data/X"]), y=np.asarray(f["data/y"]),
                       frame_step=np.asarray(pos["step"][:nf]),
                       frame_time=np.asarray(pos["time"][:nf]),
                       frame_tau=np.asarray(f["particles/neurons/temperature/value"][:nf]),
                       observables=obs, complete=bool(f.attrs.get("complete", False)),
                       provenance=json.loads(str(p.attrs.get("provenance", "{}"))),
                       schema_version=int(p.attrs["schema_version"]))
    except RunFileError:
        raise
    except (KeyError, OSError, ValueError) as exc:
        raise RunFileError(src, "", f"damaged or incomplete run file ({exc})") from None
