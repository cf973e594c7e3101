"""Shared test helpers: the tiny configs the tests start from, rendered as TOML."""

from __future__ import annotations

import copy
import json

import pytest

#: A tiny run: five Gaussian points in the plane, 64 particles, two temperatures of 300 steps.
TINY = {
    "data": {"kind": "gaussian", "n": 5, "d": 2, "seed": 1},
    "model": {"n_particles": 64},
    "dynamics": {"lam": 0.05, "eta": 0.05, "taus": [1e-2, 1e-3], "steps_per_tau": 300,
                 "seed": 3},
    "output": {"observe_every": 20, "snapshots_per_tau": 3},
}


def config_dict(changes: dict | None = None, base: dict = TINY) -> dict:
    """A copy of ``base`` with ``changes`` applied: ``{"table.key": value}`` sets a key
    (``None`` removes it), ``{"table": {...}}`` replaces a whole table."""
    out = copy.deepcopy(base)
    for key, value in (changes or {}).items():
        table, _, name = key.partition(".")
        if not name:
            out[table] = copy.deepcopy(value)
        elif value is None:
            out.get(table, {}).pop(name, None)
        else:
            out.setdefault(table, {})[name] = copy.deepcopy(value)
    return out


def toml(tables: dict) -> str:
    """Render a config dict (tables of scalars, strings and lists) as TOML text."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)
    lines = []
    for table, body in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def tiny_toml(changes: dict | None = None, base: dict = TINY) -> str:
    """TOML text of :func:`config_dict`."""
    return toml(config_dict(changes, base))


def plane8_toml(changes: dict | None = None) -> str:
    """The tiny run on the eight points in the plane (``data/plane8.csv``): 300 particles,
    1500 steps per temperature, an observation every 100 steps."""
    import os
    return tiny_toml({"data": {"kind": "file", "path": os.path.abspath("data/plane8.csv"),
                               "target": "y"},
                      "model.n_particles": 300, "dynamics.steps_per_tau": 1500,
                      "dynamics.seed": 2, "output.observe_every": 100, **(changes or {})})


def run_one_thread(text: str, directory, name: str = "tiny"):
    """Write config ``text`` to ``directory/name.toml`` and run it on one numba thread into
    ``directory/name.h5``; returns the run file's path."""
    import numba

    from meanfield import config, runner
    cfg = directory / f"{name}.toml"
    cfg.write_text(text)
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return runner.run(config.load(cfg), directory / f"{name}.h5", progress=False)
    finally:
        numba.set_num_threads(old)


@pytest.fixture
def one_thread():
    """Run numba kernels on one thread for the test (results do not depend on it; timing on a
    shared machine does)."""
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(old)


@pytest.fixture(autouse=True, scope="session")
def _reference_cache(tmp_path_factory):
    """The tests keep the disk cache of the exact references (``analysis.refcache``) in a folder
    of their own, shared by the session (subprocesses inherit it), never the user's."""
    import os
    old = os.environ.get("MEANFIELD_CACHE_DIR")
    os.environ["MEANFIELD_CACHE_DIR"] = str(tmp_path_factory.mktemp("refcache"))
    yield
    if old is None:
        os.environ.pop("MEANFIELD_CACHE_DIR", None)
    else:
        os.environ["MEANFIELD_CACHE_DIR"] = old
