"""Shared test helpers: the tiny configs the tests start from, rendered as TOML, and the guard
that the suite tests the *installed* package.

The suite imports ``meanfield``, ``solvers`` and ``analysis`` as installed (``pip install .``
or ``pip install -e .``), never by putting the checkout on ``sys.path``: a package folder left
out of the wheel then fails here as it fails for a user. The checkout is appended to
``sys.path`` (after site-packages) only so that ``benchmarks`` can be imported; subprocesses
run with ``PYTHONSAFEPATH=1`` so that ``python -m meanfield`` started in the checkout does not
import it either (Python >= 3.11). At the end of the session every loaded module of the three
packages is checked to come from the installed distribution (or from a folder named in
``PYTHONPATH``, where a developer asked for it explicitly).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest

#: The checkout holding this suite (its data/, docs/, examples/ and benchmarks/).
REPO = Path(__file__).resolve().parents[1]
#: The shipped data folder.
DATA = REPO / "data"
#: The packages the suite tests, as installed.
PACKAGES = ("meanfield", "solvers", "analysis")

os.environ["PYTHONSAFEPATH"] = "1"       # subprocesses: the current folder is not on sys.path
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))           # benchmarks only: installed packages come first
# bind the three packages now (their roots are cheap, PEP 562): a benchmark module that puts
# the checkout first on sys.path when imported then no longer changes what they are
import analysis  # noqa: E402, F401
import meanfield  # noqa: E402, F401
import solvers  # noqa: E402, F401


def installed_roots() -> list[Path]:
    """The folders from which the installed distribution ``meanfield-relu`` provides its
    packages: site-packages for a regular install, the source folder for an editable one, plus
    the folders of ``PYTHONPATH``. Raises ``RuntimeError`` when it is not installed."""
    from importlib import metadata
    from urllib.parse import unquote, urlparse
    try:
        dist = metadata.distribution("meanfield-relu")
    except metadata.PackageNotFoundError:
        raise RuntimeError("meanfield-relu is not installed: run the README's test command "
                           "(pip install \".[test]\")") from None
    roots = [Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    direct = dist.read_text("direct_url.json")
    info = json.loads(direct) if direct else {}
    if info.get("dir_info", {}).get("editable"):
        roots.append(Path(unquote(urlparse(info["url"]).path)).resolve())
    roots.append(Path(dist.locate_file("")).resolve())
    return roots


def foreign_modules(modules) -> list[str]:
    """``name: file`` of each loaded module of :data:`PACKAGES` that the installed
    distribution does not provide (see :func:`installed_roots`)."""
    roots = installed_roots()
    bad = []
    for name, mod in sorted(modules.items()):
        if name.split(".")[0] not in PACKAGES or getattr(mod, "__file__", None) is None:
            continue
        f = Path(mod.__file__).resolve()
        if not any(f.is_relative_to(r) for r in roots):
            bad.append(f"{name}: {f}")
    return bad


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked long (the longest end-to-end runs: "
                          "sweeps on a Dask cluster, SIGKILL at random moments, the tutorial's "
                          "study); CI runs them with --long -m long")


def pytest_configure(config):
    """Fill numba's cache with every stepping kernel variant once, in clean subprocesses,
    before any test runs (in the controller only: xdist workers start after it).

    The tests call the kernels in-process in many ways, on data of every input dimension; on
    an empty cache the first of them compiles a variant and saves it, and a run of the suite
    on a fresh clone then saw ten processes die of SIGSEGV loading Euler's ``d = 2`` kernel
    (an entry whose machine code differed from a clean compile of the same signature; not
    reproduced outside the suite). Compiling each variant once here, as the installation's
    first run did before kernels compiled lazily, keeps the suite independent of which test
    comes first."""
    if hasattr(config, "workerinput"):      # an xdist worker: the controller has done it
        return
    from solvers.stepper import compile_ahead, kernel_variants
    for integrator, relu in (("em", True), ("mala", True), ("mala", False)):
        compile_ahead(kernel_variants(), integrator=integrator, relu=relu)


def pytest_collection_modifyitems(config, items):
    """Leave out the tests marked ``long`` unless ``--long`` is given (deselected, not skipped:
    the default command is the README's test command, and they are a tier of their own)."""
    if config.getoption("--long"):
        return
    long = [it for it in items if it.get_closest_marker("long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [it for it in items if not it.get_closest_marker("long")]


def pytest_report_header(config):
    return f"meanfield under test: {Path(meanfield.__file__).resolve().parent}"


def pytest_sessionfinish(session, exitstatus):
    bad = foreign_modules(dict(sys.modules))
    if bad:
        print("\nthe suite imported modules that the installed meanfield-relu does not provide "
              "(the checkout on sys.path?):\n  " + "\n  ".join(bad[:10]), file=sys.stderr)
        session.exitstatus = 1

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
    return tiny_toml({"data": {"kind": "file", "path": str(DATA / "plane8.csv"),
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


@pytest.fixture(scope="module")
def tiny_run_file(tmp_path_factory):
    """``(config, run file)`` of the tiny run with a checkpoint every 100 steps, run once per
    test module through ``meanfield run`` on one thread (the failure tests start from it)."""
    from meanfield import cli
    d = tmp_path_factory.mktemp("tiny")
    cfg = d / "tiny.toml"
    cfg.write_text(tiny_toml({"output.checkpoint_every": 100}))
    out = d / "tiny.h5"
    assert cli.main(["run", str(cfg), "-o", str(out), "--quiet", "--threads", "1"]) == 0
    return cfg, out


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
