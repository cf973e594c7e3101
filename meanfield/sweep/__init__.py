"""Studies: grids of independent runs (temperature ladders x weight decay x width x seeds x
data sets) executed with Dask distributed, locally or on a cluster.

``meanfield sweep STUDY.toml`` is the command line; :class:`Study` is the Python API. A study
file is a run config plus a ``[sweep]`` table (:mod:`meanfield.sweep.spec`); its jobs write one
run file each, ``run-<config hash>.h5``, into the study directory, indexed by ``manifest.json``
(:mod:`meanfield.sweep.manifest`). Rerunning a study skips finished jobs and resumes partial ones.
"""

from meanfield.sweep.execute import Summary, run_study
from meanfield.sweep.spec import Job, StudySpec, expand, load, loads
from meanfield.sweep.study import Study

__all__ = ["Study", "Job", "StudySpec", "Summary", "run_study", "load", "loads", "expand"]
