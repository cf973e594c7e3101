"""End to end through the command line: run -> inspect -> analyze on a tiny config."""

import json

import numpy as np
import pytest
from conftest import DATA, tiny_toml

from meanfield.cli import main


def tiny(csv, changes=None):
    """The tiny config of ``conftest`` on a data file: 300 particles, tau = 1e-2 and 1e-4."""
    return tiny_toml({"data": {"kind": "file", "path": csv, "target": "y"},
                      "model.n_particles": 300,
                      "dynamics.taus": [1e-2, 1e-4], "dynamics.steps_per_tau": 1500,
                      "dynamics.seed": None, "output.observe_every": 100,
                      "output.snapshots_per_tau": 2, **(changes or {})})


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    cfg = d / "tiny.toml"
    cfg.write_text(tiny(str(DATA / "plane8.csv")))
    out = d / "tiny.h5"
    assert main(["run", str(cfg), "-o", str(out), "--quiet"]) == 0
    return cfg, out


def test_inspect_json(tiny_run, capsys):
    cfg, out = tiny_run
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"schema_version", "n_particles", "d", "n", "complete", "frames", "config"}
    assert doc["complete"] is True and doc["n_particles"] == 300 and (doc["n"], doc["d"]) == (8, 2)
    assert doc["chains"] == 1
    assert [f["tau"] for f in doc["frames"]] == [1e-2, 1e-2, 1e-4, 1e-4]
    assert [f["step"] for f in doc["frames"]] == [1125, 1500, 2625, 3000]
    np.testing.assert_allclose([f["time"] for f in doc["frames"]],
                               [0.05 * s for s in (1125, 1500, 2625, 3000)])


@pytest.mark.long
@pytest.mark.slow       # the full analysis with W2 and both references (36 s under load)
def test_analyze_json(tiny_run, capsys, tmp_path):
    cfg, out = tiny_run
    capsys.readouterr()
    assert main(["analyze", str(out), "-o", str(tmp_path / "rep"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert set(rep) >= {"d", "n", "P", "bound_2P_minus_1", "bound_P_minus_1",
                        "general_position", "snapshots"}
    assert rep["P"] == 58 and rep["general_position"] is True      # Cover: 2(1 + 7 + 21)
    assert rep["bound_2P_minus_1"] == 115 and rep["bound_P_minus_1"] == 57
    s = rep["snapshots"][-1]
    assert set(s) >= {"tau", "step", "risk", "n_rays", "n_hyperplanes", "rays", "kinks", "f_train"}
    assert 1 <= s["n_rays"] <= rep["bound_2P_minus_1"]
    assert s["n_hyperplanes"] <= s["n_rays"]
    for q in s["rays"]:
        assert set(q) >= {"direction", "sign", "weight", "mass_fraction"}
        assert np.sign(q["weight"]) == q["sign"]
    for f in ("report.md", "report.json", "predictor.png", "directions.png"):
        assert (tmp_path / "rep" / f).stat().st_size > 0


def test_existing_output_refused(tiny_run, capsys):
    cfg, out = tiny_run
    before = out.read_bytes()
    assert main(["run", str(cfg), "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "exists" in err[0]
    assert out.read_bytes() == before


def test_bad_config_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text(tiny("x.csv", {"dynamics.lam": -0.05}))
    assert main(["run", str(p), "-o", str(tmp_path / "o.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.toml" in err[0] and "dynamics.lam" in err[0]
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("argv,words", [
    (["run", "--threads", "0"], "--threads"),
    (["run", "--threads", "1000"], "--threads"),
    (["run", "-o", ""], "output path is empty"),
    (["run", ""], "config path is empty"),
])
def test_bad_command_lines_exit_2_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_analyze_into_a_file_refused(tiny_run, tmp_path, capsys):
    cfg, out = tiny_run
    target = tmp_path / "afile"
    target.write_text("keep")
    capsys.readouterr()
    assert main(["analyze", str(out), "-o", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a report directory" in err[0]
    assert target.read_text() == "keep"


def test_analyze_a_config_suggests_running_it(tmp_path, capsys):
    cfg = tmp_path / "study.toml"
    cfg.write_text('[data]\nkind = "gaussian"\n')
    assert main(["analyze", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "study.toml" in err and "is a config, not a run file" in err
    assert f"meanfield run {cfg} -o RUN.h5" in err
    assert not (tmp_path / "study-report").exists()


@pytest.mark.parametrize("k,running", [(10, 0), (22, 1)])
def test_inspect_marks_the_stage_still_running(tmp_path, capsys, monkeypatch, k, running):
    """An unfinished run (stopped at its k-th observation boundary: 15 a stage) has no
    verdict on the stage it was in, only on the stages it finished."""
    from support import stop_after

    from meanfield import config, runner
    from meanfield.errors import Interrupted
    stop_after(monkeypatch, k)
    out = tmp_path / "r.h5"
    with pytest.raises(Interrupted):
        runner.run(config.loads(tiny_toml()), out, progress=False, threads=1)
    part = str(out) + ".part"
    capsys.readouterr()
    assert main(["inspect", part, "--json"]) == 0       # no writer: stopped, not running
    st = json.loads(capsys.readouterr().out)["stages"]
    assert [s["stopped"] for s in st] == [s == running for s in range(2)]
    assert not any(s["running"] for s in st)
    now = st[running]
    assert 0 < now["steps"] < 300
    assert now["stationary"] is None and now["stationarity"] is None
    for s in st[:running]:                      # finished stages keep their verdict
        assert s["steps"] == 300 and isinstance(s["stationary"], bool) and s["stationarity"]
    # while a process holds the writer lock, the stage is running
    import os

    from meanfield.store.locks import _take_writer_lock
    fd = _take_writer_lock(part)
    assert fd is not None, "record locks unsupported here"
    try:
        assert main(["inspect", part, "--json"]) == 0
        held = json.loads(capsys.readouterr().out)["stages"]
        assert main(["inspect", part]) == 0
    finally:
        os.close(fd)
    assert [s["running"] for s in held] == [s == running for s in range(2)]
    assert not any(s["stopped"] for s in held)
    lines = capsys.readouterr().out.split("stages\n")[1].splitlines()
    assert "running (no verdict yet)" in lines[running]
    assert not any("stationary" in ln for ln in lines[running:])
    assert sum("running" in ln for ln in lines) == 1
    assert not any(ln.startswith("stopped") for ln in lines)
    # with no writer (interrupted, as here, or killed) it is not "running": it stopped, and
    # the last line says how to continue it
    assert main(["inspect", part]) == 0
    lines = capsys.readouterr().out.split("stages\n")[1].splitlines()
    assert lines[running].endswith("stopped here, no process is writing the file (no verdict)")
    assert not any("running" in ln for ln in lines)
    assert lines[-1] == (f"stopped: no process is writing {part} (interrupted or killed); to "
                         "continue it, run the same 'meanfield run' command again with "
                         f"--resume (its output: {out})")
    # the finished run: every stage judged, none running
    monkeypatch.undo()
    assert main(["inspect", str(run_to_end(tmp_path)), "--json"]) == 0
    done = json.loads(capsys.readouterr().out)["stages"]
    assert [s["running"] for s in done] == [s["stopped"] for s in done] == [False, False]
    assert all(isinstance(s["stationary"], bool) for s in done)


def run_to_end(tmp_path):
    from meanfield import config, runner
    return runner.run(config.loads(tiny_toml()), tmp_path / "done.h5", progress=False,
                      threads=1)


def test_run_creates_missing_output_folders(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(tiny_toml())
    out = tmp_path / "some" / "new" / "nested" / "dir" / "run.h5"
    assert main(["run", str(cfg), "-o", str(out), "--quiet", "--threads", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.h5"]
    assert main(["inspect", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"] is True


def test_inspect_gives_a_stationary_stage_its_rhat_and_ess_per_chain():
    """A stationary stage's line carries the numbers of its verdict: R-hat and the bulk/tail
    ESS divided by the chains, as report.md shows them; a verdict without them adds nothing."""
    import numpy as np

    from analysis.stationarity import verdict
    from meanfield.cli.inspect import _convergence_text
    rng = np.random.default_rng(0)
    F = rng.normal(size=(2, 4000, 3))                  # two chains of white noise
    v = verdict(np.arange(1, 4001), F).to_dict()
    assert v["stationary"] and v["n_chains"] == 2
    assert _convergence_text(v) == (f" (R-hat {v['rhat']:.3f}, bulk/tail ESS per chain "
                                    f"{v['ess_bulk'] / 2:.0f}/{v['ess_tail'] / 2:.0f})")
    assert _convergence_text({"rhat": None, "ess_bulk": None, "ess_tail": None}) == ""


def test_a_second_interrupt_of_a_run_says_how_to_continue(tmp_path, capsys, monkeypatch):
    """A second signal while the first one's checkpoint is pending aborts the run
    (``AbortedRun``, raised by the run's own handler): the command line says what is kept and
    how to continue. A first Ctrl-C outside that window (while loading, say) is only
    'interrupted': there may be nothing to resume."""
    import signal

    from meanfield import runner
    from meanfield.runner.signals import _StopRequest

    def twice(*a, **kw):                  # the run's handler, sent two signals
        stop = _StopRequest(lambda msg: None)
        stop._handler(signal.SIGINT, None)
        stop._handler(signal.SIGINT, None)
    monkeypatch.setattr(runner, "run", twice)
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml())
    assert main(["run", str(cfg), "-o", str(tmp_path / "r.h5"), "--quiet"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["meanfield: interrupted again, before that interrupt's checkpoint was "
                   "written; the last one written before it, if any, is kept: to continue "
                   "it, run the same 'meanfield run' command again with --resume"]

    def first(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner, "run", first)
    assert main(["run", str(cfg), "-o", str(tmp_path / "r.h5"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == "meanfield: interrupted"
