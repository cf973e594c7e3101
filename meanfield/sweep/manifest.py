"""The study manifest: ``<study dir>/manifest.json``, an index of the jobs and their status.

Only the process driving a study writes it, always to a temporary file in the same directory
that is then renamed over the old one (``os.replace``), so a reader sees either the previous or
the next complete document, never a torn one, and can read it while the study runs.

Document (``format = "meanfield-study"``, ``version = 1``)::

    {"format", "version", "study_file", "study_hash", "axes": {name: [values]},
     "shape": [len per axis], "updated": ISO time, "counts": {status: n},
     "jobs": [{"index", "id", "axis_values", "config", "run_file", "status", "error",
               "worker", "started", "finished", "wall_s", "threads", "attempts"}]}

``status`` is one of :data:`STATUSES`; ``run_file`` is relative to the study directory.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from meanfield import atomic
from meanfield.errors import StudyError

MANIFEST = "manifest.json"
FORMAT = "meanfield-study"
VERSION = 1
STATUSES = ("pending", "running", "done", "failed")


def manifest_path(directory) -> Path:
    """The manifest file of the study directory ``directory``."""
    return Path(directory) / MANIFEST


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read(directory) -> dict:
    """Read and check a study directory's manifest.

    Raises
    ------
    StudyError
        No manifest, not JSON, or not a meanfield study manifest of a supported version.
    """
    p = manifest_path(directory)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyError(str(directory), "", f"not a study directory (no {MANIFEST})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StudyError(str(p), "", f"unreadable manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StudyError(str(p), "format", f"not a meanfield study manifest (expected {FORMAT!r})")
    if int(doc.get("version", 0)) > VERSION:
        raise StudyError(str(p), "version", f"version {doc.get('version')} is newer than this "
                                            f"meanfield supports ({VERSION}); upgrade meanfield")
    if not isinstance(doc.get("jobs"), list):
        raise StudyError(str(p), "jobs", "missing or not a list")
    return doc


class Manifest:
    """The in-memory manifest of a study being driven, written back atomically.

    Parameters
    ----------
    directory : path-like
        The study directory.
    doc : dict
        The manifest document (see the module docstring).
    min_interval : float
        Seconds between two writes triggered by :meth:`save` (``force=True`` always writes).
    """

    def __init__(self, directory, doc: dict, min_interval: float = 0.25):
        self.directory = Path(directory)
        self.doc = doc
        self.min_interval = min_interval
        self._by_id = {j["id"]: j for j in doc["jobs"]}
        self._last = 0.0
        self._dirty = True

    @classmethod
    def for_study(cls, spec, directory, previous: dict | None = None) -> Manifest:
        """A manifest listing the jobs of ``spec`` (a :class:`~meanfield.sweep.spec.StudySpec`),
        keeping the status history of jobs that ``previous`` (an older manifest) already had."""
        old = {j["id"]: j for j in (previous or {}).get("jobs", [])}
        jobs = []
        for job in spec.jobs:
            entry = {"index": job.index, "id": job.id, "axis_values": job.axis_values,
                     "config": job.config.as_dict(), "run_file": job.run_file,
                     "status": "pending", "error": None, "worker": None, "started": None,
                     "finished": None, "wall_s": None, "threads": None, "attempts": 0}
            prev = old.get(job.id)
            if prev:
                for k in ("status", "error", "worker", "started", "finished", "wall_s",
                          "threads", "attempts"):
                    if k in prev:
                        entry[k] = prev[k]
            jobs.append(entry)
        doc = {"format": FORMAT, "version": VERSION, "study_file": spec.source,
               "study_hash": spec.hash(), "axes": spec.axes, "shape": list(spec.shape),
               "base": spec.base, "created": (previous or {}).get("created", _now()),
               "updated": _now(), "counts": {}, "jobs": jobs}
        return cls(directory, doc)

    def job(self, job_id: str) -> dict:
        return self._by_id[job_id]

    def set(self, job_id: str, **fields) -> None:
        """Update fields of one job entry (``status`` must be one of :data:`STATUSES`)."""
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields['status']!r}")
        self._by_id[job_id].update(fields)
        self._dirty = True

    def counts(self) -> dict:
        c = {s: 0 for s in STATUSES}
        for j in self.doc["jobs"]:
            c[j["status"]] += 1
        return c

    def save(self, force: bool = False) -> bool:
        """Write the manifest if it changed and ``min_interval`` has passed (or ``force``).
        Returns whether it was written."""
        now = time.monotonic()
        if not self._dirty or (not force and now - self._last < self.min_interval):
            return False
        self.doc["updated"] = _now()
        self.doc["counts"] = self.counts()
        atomic.write_text(manifest_path(self.directory),
                          json.dumps(self.doc, indent=1, sort_keys=False) + "\n")
        self._last = now
        self._dirty = False
        return True
