"""Property-based test: generated configs, data files and damaged run files through every
command. Whatever the input, a command never shows a traceback; a refusal (exit 2) is one
line; a failure (exit 1) ends in one ``meanfield`` line; and no file that existed before the
command changed unless the command succeeded and the file is its declared output.

CI runs a bounded number of examples. ``MEANFIELD_HYPOTHESIS=full`` runs the long profile
(thousands of generated cases) once for a report; ``MEANFIELD_HYPOTHESIS_EXAMPLES`` overrides
the number of examples per test.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meanfield import cli

settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("full", max_examples=500, deadline=None,
                          suppress_health_check=list(HealthCheck), print_blob=True)
settings.load_profile(os.environ.get("MEANFIELD_HYPOTHESIS", "ci"))
if os.environ.get("MEANFIELD_HYPOTHESIS_EXAMPLES"):
    settings.register_profile("override", parent=settings.get_profile(
        os.environ.get("MEANFIELD_HYPOTHESIS", "ci")),
        max_examples=int(os.environ["MEANFIELD_HYPOTHESIS_EXAMPLES"]))
    settings.load_profile("override")

#: Every command invocation of this module, for the report (``-s`` prints the totals).
CALLS = {"commands": 0, "exit": {}}

from support import TINY, checksums, old_format

# ----------------------------------------------------------------------------- harness

def command(root: Path, argv, outputs=()):
    """Run ``meanfield ARGV`` in-process in ``root`` and check the invariants.

    ``outputs``: names (relative to ``root``) a successful command may create or change.
    Returns the exit code.
    """
    before = checksums(root)
    err, out = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                code = cli.main([str(a) for a in argv])
            except SystemExit as exc:           # argparse
                code = exc.code
    finally:
        os.chdir(cwd)
    text = err.getvalue()
    CALLS["commands"] += 1
    CALLS["exit"][code] = CALLS["exit"].get(code, 0) + 1
    assert "Traceback" not in text, (argv, text)
    assert code in (0, 1, 2), (argv, code, text)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("meanfield"), (argv, text)
    if code == 1:
        assert lines and lines[-1].startswith("meanfield"), (argv, text)
    after = checksums(root)
    allowed = set()
    if code == 0:
        for o in outputs:
            allowed |= {k for k in set(before) | set(after) if k == o
                        or k.startswith((o + "/", o + "."))}
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)} - allowed
    if code != 0:
        # a failed or refused command leaves what existed as it was; a diverged run keeps its
        # frames (RUN.h5.part and the last checkpoint) by design
        keep = {k for k in changed if k not in before and code == 1 and ".h5." in k}
        changed -= keep
    else:
        changed = {k for k in changed if k in before}      # a success may add files
    assert not changed, (argv, code, sorted(changed), text)
    return code


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("props")


@pytest.fixture(scope="module")
def tiny_run(workdir):
    d = workdir / "tiny"
    d.mkdir()
    (d / "tiny.toml").write_text(TINY)
    assert cli.main(["run", str(d / "tiny.toml"), "-o", str(d / "tiny.h5"), "--quiet",
                     "--threads", "1"]) == 0
    return d / "tiny.toml", (d / "tiny.h5").read_bytes()


@contextlib.contextmanager
def case_dir(workdir):
    d = Path(tempfile.mkdtemp(dir=workdir))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- strategies

def magnitudes():
    """Floats from 1e-15 to 1e15 in size, either sign, and zero."""
    return st.one_of(st.just(0.0), st.builds(
        lambda m, e, s: s * m * 10.0 ** e, st.floats(1, 9.99), st.integers(-15, 15),
        st.sampled_from([1.0, -1.0])))


def non_finite():
    return st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def matrices(draw, n_max=7, d_max=3):
    """(n, d+1) data, columns of mixed magnitudes, sometimes a non-finite entry."""
    n = draw(st.integers(1, n_max))
    d = draw(st.integers(1, d_max))
    scale = np.array([10.0 ** draw(st.integers(-15, 15)) for _ in range(d + 1)])
    A = np.array(draw(st.lists(st.lists(st.floats(-5, 5), min_size=d + 1, max_size=d + 1),
                               min_size=n, max_size=n))) * scale
    if draw(st.integers(0, 9)) == 0:
        A[draw(st.integers(0, n - 1)), draw(st.integers(0, d))] = draw(non_finite())
    return A


def bad_value():
    return st.one_of(st.text(max_size=4), st.booleans(), non_finite(),
                     st.lists(st.integers(-3, 3), max_size=2), st.just({"x": 1}),
                     st.integers(-2**63, 0), st.integers(2**31, 2**63 - 1),
                     st.floats(1e16, 1e300), st.floats(-1e300, -1e-300))


#: Small valid values per key, so that generated valid configs run in well under a second.
VALID = {
    "model": {"activation": st.sampled_from(["relu", "softplus", "capped"]),
              "n_particles": st.integers(1, 24), "init_scale": st.floats(0.01, 3),
              "sharpness": st.floats(0.5, 20), "cap": st.floats(0.5, 5)},
    "dynamics": {"lam": st.floats(0.005, 1), "eta": st.floats(1e-4, 0.2),
                 "taus": st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 0.1)), min_size=1,
                                  max_size=2),
                 "steps_per_tau": st.integers(1, 40), "batch_size": st.integers(0, 2),
                 "seed": st.integers(0, 2**63 - 1)},
    "output": {"observe_every": st.integers(1, 30), "snapshots_per_tau": st.integers(1, 3),
               "checkpoint_every": st.integers(1, 50)},
}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


@st.composite
def tables(draw):
    """The model/dynamics/output tables: each key absent, small and valid, or bad."""
    out = {}
    for sec, keys in VALID.items():
        tbl = {}
        for key, strat in keys.items():
            kind = draw(st.integers(0, 29))
            if kind < 15:
                continue                         # default
            tbl[key] = draw(bad_value() if kind == 29 else strat)
        if draw(st.integers(0, 30)) == 0:
            tbl[draw(st.sampled_from(["lamda", "n_particle", "tau"]))] = 1
        out[sec] = tbl
    # the defaults are far too long for a property test: keep every run small
    out["dynamics"].setdefault("steps_per_tau", draw(st.integers(1, 40)))
    out["model"].setdefault("n_particles", draw(st.integers(1, 24)))
    out["output"].setdefault("observe_every", 10)
    out["output"].setdefault("checkpoint_every", 20)
    return out


@st.composite
def data_tables(draw, root_files):
    kind = draw(st.sampled_from(["gaussian", "two_point", "grid", "inline", "file", "bogus"]))
    if kind == "gaussian":
        return {"kind": kind, "n": draw(st.one_of(*[st.integers(1, 8)] * 4, bad_value())),
                "d": draw(st.integers(1, 3)), "seed": draw(st.integers(0, 2**63 - 1))}
    if kind == "two_point":
        return {"kind": kind, "d": draw(st.integers(1, 3)),
                "norm": draw(st.one_of(magnitudes(), bad_value())),
                "labels": draw(st.sampled_from(["even", "odd", "neither"])),
                "y": draw(magnitudes())}
    if kind == "grid":
        return {"kind": kind, "d": draw(st.one_of(st.integers(1, 2), st.integers(10**4, 10**6))),
                "points_per_axis": draw(st.one_of(st.integers(1, 3), bad_value())),
                "extent": draw(st.one_of(magnitudes(), bad_value()))}
    if kind == "inline":
        A = draw(matrices())
        X = [[float(v) for v in row[:-1]] for row in A]
        if draw(st.integers(0, 9)) == 0 and len(X) > 1:
            X[0] = X[0] + [1.0]                       # ragged
        return {"kind": kind, "X": X, "y": [float(v) for v in A[:, -1]]}
    if kind == "file":
        return {"kind": kind, "path": draw(st.sampled_from(root_files))}
    return {"kind": kind}


@st.composite
def data_files(draw):
    """``(name, bytes)``: CSV in several encodings and layouts, .npy, .npz, damaged ones."""
    A = draw(matrices())
    fmt = draw(st.sampled_from(["csv", "csv", "npy", "npz", "npz-pickle", "not-npz",
                                "truncated-npy", "txt"]))
    if fmt == "csv":
        sep = draw(st.sampled_from([",", ", ", ";", "\t"]))
        rows = [sep.join(repr(float(v)) for v in r) for r in A]
        if draw(st.booleans()):
            rows.insert(0, sep.join(f"c{k}" for k in range(A.shape[1])))
        if draw(st.integers(0, 5)) == 0:
            rows.insert(draw(st.integers(0, len(rows))), "# a comment")
        if draw(st.integers(0, 6)) == 0 and len(rows) > 1:
            rows[-1] = rows[-1] + sep + "7"            # ragged
        text = "\n".join(rows) + draw(st.sampled_from(["\n", "", "\r\n"]))
        enc = draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1"]))
        return "d.csv", text.encode(enc, errors="replace")
    buf = io.BytesIO()
    if fmt == "npy":
        dtype = draw(st.sampled_from(["<f8", "<f4", "<i4", "<c16", "|b1"]))
        np.save(buf, A.astype(dtype) if dtype != "<i4" else np.nan_to_num(A).astype(dtype),
                allow_pickle=False)
        return "d.npy", buf.getvalue()
    if fmt == "npz":
        names = draw(st.sampled_from([("X", "y"), ("X",), ("x", "y")]))
        arrays = {"X": A[:, :-1], "y": A[:, -1], "x": A}
        np.savez(buf, **{k: arrays[k] for k in names})
        return "d.npz", buf.getvalue()
    if fmt == "npz-pickle":
        np.savez(buf, X=np.array([{"a": 1}] * len(A), dtype=object), y=A[:, -1])
        return "d.npz", buf.getvalue()
    if fmt == "not-npz":
        return "d.npz", draw(st.binary(max_size=64))
    if fmt == "truncated-npy":
        np.save(buf, A)
        raw = buf.getvalue()
        return "d.npy", raw[:draw(st.integers(0, len(raw) - 1))]
    return "d.txt", b"1,2,3\n"


# ----------------------------------------------------------------------------- properties

@given(tbls=tables(), data=st.data())
def test_generated_configs_through_run_inspect_analyze_references(workdir, tbls, data):
    with case_dir(workdir) as root:
        name, raw = data.draw(data_files())
        (root / name).write_bytes(raw)
        dat = data.draw(data_tables([name, "missing.csv", "."]))
        doc = {"data": dat, **tbls}
        text = "".join(f"[{sec}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in tbl.items())
                       for sec, tbl in doc.items())
        if data.draw(st.integers(0, 40)) == 0:
            text = text[:data.draw(st.integers(0, len(text)))]     # truncated TOML
        (root / "c.toml").write_text(text)
        code = command(root, ["run", "c.toml", "-o", "r.h5", "--quiet", "--threads", "1"],
                       outputs=["r.h5"])
        if code == 0:
            command(root, ["inspect", "r.h5", "--json"])
            command(root, ["dichotomies", "r.h5"])
            if data.draw(st.integers(0, 3)) == 0:
                command(root, ["analyze", "r.h5", "-o", "rep", "--no-w2", "--no-references",
                               "--no-figures"], outputs=["rep"])
            command(root, ["run", "c.toml", "-o", "r.h5", "--resume", "--quiet"])
        command(root, ["dichotomies", "c.toml", "--json"])
        command(root, ["dichotomies", name])
        if data.draw(st.integers(0, 5)) == 0:
            command(root, ["reference", "convex", "c.toml", "--json"])


#: Mutations of a run file: truncated, bits flipped, a block zeroed, or the global heap
#: damaged (the first object header of a global heap collection zeroed: HDF5 once looped
#: forever there reading a variable-length string; every reader now refuses it within
#: ``meanfield.store.trust.ATTRIBUTE_DEADLINE``, shortened here).
MUTATIONS = [st.tuples(st.just("truncate"), st.floats(0, 1)),
             st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)),
                                                 min_size=1, max_size=8)),
             st.tuples(st.just("zero"), st.floats(0, 1), st.integers(1, 4096)),
             st.tuples(st.just("heap"))]


@given(mutation=st.one_of(*MUTATIONS), layout=st.sampled_from(["current", "before checksums"]),
       command_name=st.sampled_from(["inspect", "dichotomies", "analyze", "resume"]))
def test_damaged_run_files_through_every_reader(workdir, tiny_run, mutation, layout,
                                                command_name):
    """A damaged run file, of the current layout or of one written before checksums and
    fixed-length strings (variable-length strings in a global heap, no Fletcher-32)."""
    from meanfield.store import trust
    cfg, good = tiny_run
    if layout != "current" or mutation[0] == "heap":
        good = old_layout(workdir, good)
    raw = bytearray(good)
    if mutation[0] == "truncate":
        raw = raw[:int(mutation[1] * (len(raw) - 1))]
    elif mutation[0] == "flip":
        for where, bit in mutation[1]:
            raw[int(where * (len(raw) - 1))] ^= 1 << bit
    elif mutation[0] == "zero":
        start = int(mutation[1] * (len(raw) - 1))
        raw[start:start + mutation[2]] = bytes(len(raw[start:start + mutation[2]]))
    else:
        at = raw.find(b"GCOL")
        raw[at + 16:at + 32] = bytes(16)
    deadline, trust.ATTRIBUTE_DEADLINE = trust.ATTRIBUTE_DEADLINE, 2.0
    try:
        with case_dir(workdir) as root:
            shutil.copy(cfg, root / "c.toml")
            if command_name == "resume":
                (root / "r.h5.part").write_bytes(bytes(raw))
                command(root, ["run", "c.toml", "-o", "r.h5", "--resume", "--quiet",
                               "--threads", "1"], outputs=["r.h5"])
                return
            (root / "r.h5").write_bytes(bytes(raw))
            argv = {"inspect": ["inspect", "r.h5"],
                    "dichotomies": ["dichotomies", "r.h5", "--json"],
                    "analyze": ["analyze", "r.h5", "-o", "rep", "--no-w2", "--no-references",
                                "--no-figures"]}[command_name]
            command(root, argv, outputs=["rep"])
    finally:
        trust.ATTRIBUTE_DEADLINE = deadline


_OLD = {}


def old_layout(workdir, good: bytes) -> bytes:
    """The bytes of the tiny run file as the writer before checksums wrote it."""
    if "bytes" not in _OLD:
        (workdir / "current.h5").write_bytes(good)
        _OLD["bytes"] = old_format(workdir / "current.h5", workdir / "old.h5").read_bytes()
    return _OLD["bytes"]


@given(tbls=tables(), axes=st.dictionaries(
    st.sampled_from(["dynamics.seed", "dynamics.lam", "model.n_particles", "dynamics.bogus",
                     "sweep"]),
    st.one_of(st.lists(st.integers(0, 3), min_size=1, max_size=2),
              st.lists(st.floats(0.01, 0.5), min_size=1, max_size=2), bad_value()),
    max_size=2), mode=st.sampled_from(["--dry-run", "--serial"]))
def test_generated_studies_through_sweep(workdir, tbls, axes, mode):
    with case_dir(workdir) as root:
        doc = {"data": {"kind": "gaussian", "n": 4, "d": 1}, **tbls}
        text = "".join(f"[{sec}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in tbl.items())
                       for sec, tbl in doc.items())
        text += "[sweep]\n" + "".join(f'"{k}" = {toml_value(v)}\n' for k, v in axes.items())
        (root / "s.toml").write_text(text)
        command(root, ["sweep", "s.toml", "-o", "st", mode, "--threads", "1", "--quiet"],
                outputs=["st"])


@given(args=st.fixed_dictionaries({}, optional={
    "--neurons": st.one_of(st.sampled_from(["1", "2"]), st.text(max_size=3)),
    "--n": st.one_of(st.sampled_from(["4", "4,6"]), st.text(max_size=4)),
    "--d": st.one_of(st.sampled_from(["8", "8,16"]), st.sampled_from(["0", "-3", "1e400"])),
    "--trials": st.sampled_from(["1", "2", "0", "x"]),
    "--c": st.sampled_from(["0.5", "0.002", "2", "nan", "-1"]),
    "--init": st.sampled_from(["zero", "random", "all_active", "nope"]),
    "--max-steps": st.sampled_from(["50", "3000", "0", "99999999999999999999"]),
    "--tol": st.sampled_from(["1e-12", "0", "inf"]),
    "--spectrum-a": st.sampled_from(["0", "1", "1e308"]),
}))
def test_generated_highdim_arguments(workdir, args):
    with case_dir(workdir) as root:
        argv = ["highdim", "-o", "hd", "--quiet", "--d", "8", "--n", "4", "--trials", "1",
                "--max-steps", "200"]
        for k, v in args.items():
            argv += [k, v]
        command(root, argv, outputs=["hd"])


def test_report_counts(capsys):
    """Prints how many commands the generated cases ran (run with ``-s`` to see it)."""
    with capsys.disabled():
        print(f"\nproperty tests: {CALLS['commands']} commands, exit codes {CALLS['exit']}")
