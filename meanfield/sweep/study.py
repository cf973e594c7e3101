"""The Python API for scripting studies: build, run, load results as arrays.

Example (docs/sweep.md has the full walk-through)::

    from meanfield.sweep import Study

    study = Study.from_file("lowtemp.toml", directory="lowtemp")
    print(len(study.jobs), study.shape)          # 12 (2, 3, 2)
    summary = study.run(workers=2)               # local cluster; skips finished jobs
    res = study.results()                        # arrays over the grid
    res.risk.shape                               # (2, 3, 2, n_tau)
"""

from __future__ import annotations

import os
from pathlib import Path

from meanfield import config as _config
from meanfield.errors import StudyError
from meanfield.sweep import manifest as _manifest
from meanfield.sweep import spec as _spec
from meanfield.sweep.execute import run_study
from meanfield.sweep.summary import study_arrays


class Study:
    """A study: jobs expanded from a base config and ``[sweep]`` axes, bound to a directory.

    Parameters
    ----------
    spec : meanfield.sweep.spec.StudySpec
        The expanded study.
    directory : path-like
        Where the run files and ``manifest.json`` live.

    Attributes
    ----------
    jobs : list of meanfield.sweep.spec.Job
    axes : dict
        Dotted axis name -> list of values.
    shape : tuple of int
        Grid shape (one entry per axis); ``len(jobs) == prod(shape)``.
    directory : pathlib.Path
    """

    def __init__(self, spec, directory):
        self.spec = spec
        self.directory = Path(directory)

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_file(cls, path, directory=None) -> Study:
        """Load a study file. ``directory`` defaults to the file's stem in the current
        directory (``lowtemp.toml`` -> ``./lowtemp``).

        Raises
        ------
        StudyError
            Any problem in the study file (see :func:`meanfield.sweep.spec.expand`).
        """
        spec = _spec.load(path)
        if directory is None:
            directory = Path.cwd() / Path(path).stem
        return cls(spec, directory)

    @classmethod
    def from_dict(cls, raw: dict, directory, source: str = "<dict>",
                  base_dir: str | os.PathLike = ".") -> Study:
        """Build a study from a dict with the study-file schema (``base``, the run-config
        tables, ``sweep``)."""
        return cls(_spec.expand(raw, source, base_dir), directory)

    @classmethod
    def open(cls, directory) -> Study:
        """Reopen a study from its directory's manifest (no study file needed).

        Raises
        ------
        StudyError
            No or unreadable manifest, or a job config in it that does not validate.
        """
        doc = _manifest.read(directory)
        src = str(_manifest.manifest_path(directory))
        jobs = []
        for entry in doc["jobs"]:
            cfg = _config.validate(entry["config"], src, "/")
            if cfg.hash() != entry["id"]:
                raise StudyError(src, f"jobs[{entry['index']}].id",
                                 f"does not match the hash of its config ({cfg.hash()})")
            jobs.append(_spec.Job(index=int(entry["index"]), id=entry["id"],
                                  axis_values=entry["axis_values"], config=cfg))
        spec = _spec.StudySpec(source=doc.get("study_file", src), axes=doc.get("axes", {}),
                               base=doc.get("base", {}), jobs=jobs)
        return cls(spec, directory)

    # --- description --------------------------------------------------------------------
    @property
    def jobs(self) -> list:
        return self.spec.jobs

    @property
    def axes(self) -> dict:
        return self.spec.axes

    @property
    def shape(self) -> tuple:
        return self.spec.shape

    def run_file(self, job) -> Path:
        """Path of a job's run file (``job``: a :class:`~meanfield.sweep.spec.Job` or its id)."""
        jid = job if isinstance(job, str) else job.id
        return self.directory / _spec.run_file_name(jid)

    def __repr__(self) -> str:
        axes = ", ".join(f"{k}[{len(v)}]" for k, v in self.axes.items()) or "no axes"
        return f"Study({len(self.jobs)} jobs: {axes}; directory={str(self.directory)!r})"

    # --- execution ----------------------------------------------------------------------
    def run(self, workers=None, *, scheduler=None, client=None, serial=False, threads=None,
            progress=None):
        """Run the jobs that are not complete yet; see :func:`meanfield.sweep.execute.run_study`
        for the parameters. Returns a :class:`~meanfield.sweep.execute.Summary`."""
        return run_study(self.spec, self.directory, workers=workers, scheduler=scheduler,
                         client=client, serial=serial, threads=threads, progress=progress)

    def status(self) -> dict:
        """Counts of jobs per status, from the manifest (all pending before the first run);
        a job whose run file is complete counts as done whatever the manifest says."""
        try:
            doc = _manifest.read(self.directory)
        except StudyError:
            return {"pending": len(self.jobs), "running": 0, "done": 0, "failed": 0}
        from meanfield.sweep.job import run_file_complete
        counts = {s: 0 for s in _manifest.STATUSES}
        for j in doc["jobs"]:
            # a job that finished after its driver stopped (Ctrl-C) has a complete run file
            done = j["status"] != "done" and run_file_complete(self.directory / j["run_file"])
            counts["done" if done else j["status"]] += 1
        return counts

    def results(self, **kwargs):
        """Per-run results as arrays over the study grid: an
        :class:`meanfield.sweep.summary.StudyArrays` (keyword arguments go to
        :func:`meanfield.sweep.summary.study_arrays`)."""
        return study_arrays(self.directory, **kwargs)
