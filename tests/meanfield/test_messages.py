"""What the commands say: flags named as the command spells them, one refusal for a config
given where a run file belongs, and ``inspect`` printing the config it promises."""

from __future__ import annotations

import argparse
import shutil
import threading
import time

import numpy as np
import pytest
from conftest import tiny_toml
from support import one_line

from meanfield import config, data
from meanfield.cli import main
from meanfield.store import RunWriter
from solvers.observation import Observation


@pytest.fixture
def headed(tmp_path):
    p = tmp_path / "pts.csv"
    p.write_text("x1,x2,y\n0,1,2\n1,0,3\n2,2,1\n")
    return p


@pytest.mark.parametrize("extra,field,words", [
    ([], "header", ["--target NAME, one of: x1, x2, y", "--features NAMES"]),
    (["--target", "z"], "--target", ["no column 'z'"]),
    (["--target", "y", "--features", "x3"], "--features", ["no column 'x3'"]),
])
def test_dichotomies_names_its_flags_not_config_keys(headed, capsys, extra, field, words):
    line = one_line(capsys, main(["dichotomies", str(headed), *extra]))
    assert line.startswith(f"meanfield: error: {headed}: {field}: ")
    assert all(w in line for w in words) and "data." not in line


def test_dichotomies_without_a_header_names_the_flag(tmp_path, capsys):
    p = tmp_path / "plain.csv"
    p.write_text("0,1,2\n1,0,3\n2,2,1\n")
    line = one_line(capsys, main(["dichotomies", str(p), "--target", "y"]))
    assert f"{p}: --target: the file has no header line" in line
    assert "leave out --target and --features" in line and "data." not in line


@pytest.mark.parametrize("follow", [[], ["--follow"], ["--json"]])
def test_inspect_on_a_config_says_run_it_first_like_analyze(tmp_path, capsys, follow):
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml())
    analyze = one_line(capsys, main(["analyze", str(cfg)]))
    inspect = one_line(capsys, main(["inspect", str(cfg), *follow]))
    assert "run it first" in inspect and "not a readable HDF5 file" not in inspect
    want = (f"meanfield: error: {cfg}: is a config, not a run file: run it first (meanfield run "
            f"{cfg} -o RUN.h5), then ")
    assert analyze == want + "analyse RUN.h5"
    assert inspect == want + "inspect RUN.h5"


def test_inspect_prints_every_field_of_the_config(tmp_path, capsys):
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2, "seed": 4},
                            "model": {"n_particles": 5, "init_scale": 0.7},
                            "dynamics": {"lam": 0.0123456789, "eta": 0.02,
                                         "taus": [0.1, 0.003], "steps_per_tau": 40,
                                         "seed": 11, "batch_size": 2},
                            "output": {"observe_every": 10, "snapshots_per_tau": 1}})
    ds = data.from_config(cfg)
    path = tmp_path / "r.h5"
    with RunWriter(path, cfg, ds, capacity=(1, 1)) as w:
        w.append_observations([Observation(step=10, time=0.2, stage=0, step_in_stage=10, tau=0.1,
                                           risk=0.5,
                                           regulariser=0.1, mean_sq_norm=1.0,
                                           stationarity=np.nan, residuals=np.zeros(3),
                                           residuals_previous=np.zeros(3),
                                           eta_lambda_max=0.01)])
        w.append_frame(np.zeros((5, 4)), 10, 0.2, 0.1, 0, 10)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    canon = __import__("json").loads(cfg.canonical_json())
    for table, body in canon.items():
        (line,) = [ln.strip() for ln in out if ln.strip().startswith(f"[{table}]")]
        for key, value in body.items():
            shown = (repr(value) if isinstance(value, float) else
                     f'"{value}"' if isinstance(value, str) else
                     "[" + ", ".join(repr(v) for v in value) + "]" if isinstance(value, list)
                     else str(value))
            assert f" {key} = {shown}" in f" {line[len(table) + 2:]}", (table, key, line)
    assert "lam = 0.0123456789" in "\n".join(out)          # exactly, not rounded


@pytest.mark.parametrize("argv,field", [
    (["--tau", "-1"], "--tau"), (["--tau", "0"], "--tau"), (["--tau", "nan"], "--tau"),
    (["--tau", "1e-2", "--rtol", "5"], "--rtol"), (["--tau", "1e-2", "--rtol", "0"], "--rtol"),
])
def test_reference_gibbs_names_the_flag_it_refuses(tmp_path, capsys, argv, field):
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml())
    line = one_line(capsys, main(["reference", "gibbs", str(cfg), *argv]))
    assert f": {field}: " in line, line


def test_sweep_without_dask_distributed_leaves_no_study_folder(tmp_path, capsys, monkeypatch):
    """The missing optional extra is said in one line (exit 2) before the study folder is
    made, so nothing is left behind."""
    from meanfield.errors import MissingDependencyError
    from meanfield.sweep import execute

    def missing():
        raise MissingDependencyError(execute.INSTALL_HINT)
    monkeypatch.setattr(execute, "require_distributed", missing)
    study = tmp_path / "study.toml"
    study.write_text(tiny_toml() + '[sweep]\n"dynamics.seed" = [0, 1]\n')
    line = one_line(capsys, main(["sweep", str(study), "-o", str(tmp_path / "out"), "--quiet"]))
    assert "Dask distributed is not installed" in line, line
    assert not (tmp_path / "out").exists()


def test_a_data_or_run_file_given_as_a_config_says_what_it_is(tmp_path, capsys, headed):
    line = one_line(capsys, main(["run", str(headed), "-o", str(tmp_path / "r.h5")]))
    assert "malformed TOML" in line and "a data file?" in line and "data.path" in line, line
    h5 = tmp_path / "x.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    line = one_line(capsys, main(["run", str(h5), "-o", str(tmp_path / "r2.h5")]))
    assert "is an HDF5 file (a run file?)" in line, line


@pytest.mark.parametrize("command", ["inspect", "analyze"])
def test_a_data_file_given_as_the_run_file_says_what_it_is(command, tmp_path, capsys):
    from meanfield.cli import main
    csv = tmp_path / "points.csv"
    csv.write_text("x1,x2,y\n0,1,1\n1,0,-1\n")
    line = one_line(capsys, main([command, str(csv)]))
    assert str(csv) in line and "is a data file, not a run file" in line
    assert "HDF5" not in line and "[data]" in line


@pytest.mark.parametrize("signum", [None, 15])
def test_an_interrupted_sweep_says_how_to_continue(tmp_path, capsys, monkeypatch, signum):
    """Ctrl-C (or SIGTERM) during a sweep ends with 130 and one line saying that the finished
    jobs are kept and that the same command continues (it said only "interrupted")."""
    from meanfield.interrupts import Terminated
    from meanfield.sweep import Study

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt if signum is None else Terminated(signum)
    monkeypatch.setattr(Study, "run", interrupted)
    study = tmp_path / "s.toml"
    study.write_text('[data]\nkind = "gaussian"\nn = 4\nd = 2\n[sweep]\n'
                     '"dynamics.seed" = [0, 1]\n')
    code = main(["sweep", str(study), "--serial", "-o", str(tmp_path / "out")])
    how = "interrupted" if signum is None else "terminated by SIGTERM"
    assert one_line(capsys, code, want=130) == (
        f"meanfield: {how}; the finished jobs are kept in {tmp_path / 'out'}: run the same "
        "command again to continue")


def test_follow_names_the_residual_drift_and_the_command_to_continue(tmp_path):
    """``inspect --follow`` of a run whose writer stopped: its progress line names the
    stationarity observable (the drift of the time-averaged residuals, computed here by hand
    from the residuals) and its last line says how to continue without a placeholder to type."""
    import io

    from meanfield.cli.inspect import follow
    from solvers.langevin import stationarity
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2},
                            "model": {"n_particles": 5},
                            "dynamics": {"taus": [0.1], "steps_per_tau": 100},
                            "output": {"observe_every": 10, "snapshots_per_tau": 1}})
    ds = data.from_config(cfg)
    path = tmp_path / "r.h5.part"
    history = []
    with RunWriter(path, cfg, ds, capacity=(1, 10)) as w:
        for k in range(1, 9):
            R = np.array([k, 0.0, -k]) * 0.01
            history.append(R)
            w.append_observations([Observation(
                step=10 * k, time=0.5 * k, stage=0, step_in_stage=10 * k, tau=0.1, risk=0.5,
                regulariser=0.1, mean_sq_norm=1.0, stationarity=stationarity(history),
                residuals=R, residuals_previous=R, eta_lambda_max=0.01)])
    # the latter half, observations 5..8, in two windows: means 5.5 and 7.5 (x 0.01) at the
    # first and last point; n = 3 times the largest difference
    drift = 3 * (7.5 - 5.5) * 0.01
    buf = io.StringIO()
    assert follow(path, interval=0.0, out=buf, poll=0.0) == 1
    progress, stopped = buf.getvalue().splitlines()[-2:]
    assert f"  residual drift={drift:.3g}  " in progress and "stationarity=" not in progress
    assert stopped == (f"stopped: no process is writing {path} (interrupted or killed); to "
                       "continue it, run the same 'meanfield run' command again with --resume "
                       f"(its output: {tmp_path / 'r.h5'})")
    assert "CONFIG" not in stopped
    # the first observations of a stage: no drift yet (NaN), printed as a dash, not "nan"
    early = tmp_path / "e.h5.part"
    with RunWriter(early, cfg, ds, capacity=(1, 10)) as w:
        R = np.array([1.0, 0.0, -1.0]) * 0.01
        assert np.isnan(stationarity([R]))
        w.append_observations([Observation(
            step=10, time=0.5, stage=0, step_in_stage=10, tau=0.1, risk=0.5, regulariser=0.1,
            mean_sq_norm=1.0, stationarity=stationarity([R]), residuals=R,
            residuals_previous=R, eta_lambda_max=0.01)])
    buf = io.StringIO()
    assert follow(early, interval=0.0, out=buf, poll=0.0) == 1
    assert "  residual drift=–  " in buf.getvalue().splitlines()[-2]


def test_follow_counts_the_plan_of_auto_stages_as_the_run_does(tmp_path):
    """With ``"auto"`` stages of a run under way the progress total is the run's own: the
    stages decided so far plus the budget of the current and each later stage (the run's bar
    read 900 000 where ``--follow`` read 503 900)."""
    import io

    from meanfield.cli.inspect import follow
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2},
                            "model": {"n_particles": 5},
                            "dynamics": {"taus": [0.1, 0.05, 0.01], "steps_per_tau": "auto",
                                         "max_steps_per_tau": 800},
                            "output": {"observe_every": 10, "snapshots_per_tau": 1}})
    ds = data.from_config(cfg)
    path = tmp_path / "r.h5.part"
    R = np.zeros(3)
    rows = [(10 * k, 0, 10 * k) for k in range(1, 31)]                 # stage 0: 300 steps
    rows += [(300 + 10 * k, 1, 10 * k) for k in range(1, 5)]           # stage 1 under way
    with RunWriter(path, cfg, ds, capacity=(1, 10)) as w:
        for step, stage, within in rows:
            w.append_observations([Observation(
                step=step, time=0.05 * step, stage=stage, step_in_stage=within,
                tau=cfg.taus[stage], risk=0.5, regulariser=0.1, mean_sq_norm=1.0,
                stationarity=0.0, residuals=R, residuals_previous=R, eta_lambda_max=0.01)])
    buf = io.StringIO()
    assert follow(path, interval=0.0, out=buf, poll=0.0) == 1
    progress = buf.getvalue().splitlines()[-2]
    want = 300 + 2 * 800
    assert progress.startswith(f"step 340/{want} ({100 * 340 / want:.0f}%)  tau=5.00e-02 "
                               "(temperature 2/3)"), progress


def _usage_error(capsys, argv):
    """The one stderr line of a usage error (argparse exits 2 through ``SystemExit``)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return one_line(capsys, exc.value.code)


@pytest.mark.parametrize("argv,typo", [
    (["run", "--thread", "1"], "--thread"),
    (["run", "--qui"], "--qui"),
    (["inspect", "x.h5", "--fol"], "--fol"),
    (["analyze", "x.h5", "--no-fig"], "--no-fig"),
    (["reference", "gibbs", "c.toml", "--ta", "0.1"], "--ta"),
])
def test_an_abbreviated_long_option_is_a_usage_error(capsys, argv, typo):
    line = _usage_error(capsys, argv)
    assert f"unrecognized arguments: {typo}" in line


def test_an_abbreviated_top_level_option_is_a_usage_error(capsys):
    line = _usage_error(capsys, ["--vers"])
    assert line == ("meanfield: error: unrecognized arguments: --vers "
                    "(see 'meanfield --help')")


@pytest.mark.parametrize("argv,prog", [
    (["run", "--quite"], "meanfield run"),
    (["inspect", "x.h5", "--jsn"], "meanfield inspect"),
    (["reference", "convex", "c.toml", "--jsonn"], "meanfield reference convex"),
])
def test_a_command_usage_error_points_to_that_commands_help(capsys, argv, prog):
    line = _usage_error(capsys, argv)
    assert line.startswith(f"{prog}: error: unrecognized arguments: {argv[-1]} ")
    assert line.endswith(f"(see '{prog} --help')")


def test_every_parser_refuses_abbreviations():
    from meanfield.cli import build_parser
    todo, seen = [build_parser()], 0
    while todo:
        p = todo.pop()
        assert p.allow_abbrev is False, p.prog
        seen += 1
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    assert seen >= 10                   # meanfield, its seven commands, reference's two


@pytest.mark.parametrize("with_part", [True, False])
def test_inspect_of_a_checkpoint_names_the_run_file_and_resume(tmp_path, capsys, with_part):
    ckpt, part = tmp_path / "r.h5.ckpt", tmp_path / "r.h5.part"
    with open(ckpt, "wb") as fh:                # a checkpoint is an .npz archive, not HDF5
        np.savez(fh, step=np.int64(3))
    if with_part:
        part.write_bytes(b"")
    line = one_line(capsys, main(["inspect", str(ckpt)]))
    assert line.startswith(f"meanfield: error: {ckpt}: is the checkpoint of an interrupted run")
    assert "not a readable HDF5 file" not in line
    if with_part:
        assert line.endswith(f"inspect its run file {part}; to continue it, run the same "
                             "'meanfield run' command again with --resume")
    else:
        assert line.endswith(f"its run file {part} is missing, so the run cannot be resumed "
                             "(start it over with --overwrite)")


def test_resume_with_nothing_to_resume_says_so_and_starts_a_new_run(tmp_path, capsys,
                                                                     one_thread):
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml())
    out = tmp_path / "fresh.h5"
    code = main(["run", str(cfg), "-o", str(out), "--resume", "--quiet", "--threads", "1"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0 and out.exists()
    assert err[0] == (f"meanfield: note: nothing to resume: no interrupted run of {out} "
                      "(fresh.h5.part and fresh.h5.ckpt not found); starting a new run")
    assert len(err) == 2 and err[1].startswith(f"meanfield: wrote {out} in ")


def test_resume_of_a_part_without_checkpoint_says_it_starts_over(tmp_path, capsys,
                                                                 monkeypatch, one_thread):
    from support import stop_after

    from meanfield import runner
    from meanfield.errors import Interrupted
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml())
    out = tmp_path / "r.h5"
    with monkeypatch.context() as m:
        stop_after(m, 3)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg), out, progress=False)
    out.with_name("r.h5.ckpt").unlink()              # killed before the first checkpoint
    capsys.readouterr()
    code = main(["run", str(cfg), "-o", str(out), "--resume", "--quiet", "--threads", "1"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0 and out.exists() and not out.with_name("r.h5.part").exists()
    assert err[0] == (f"meanfield: note: nothing to resume: {out}.part has no checkpoint "
                      "r.h5.ckpt (stopped before the first one); starting a new run")


def test_follow_of_a_run_not_started_gives_up_naming_the_path_typed(tmp_path, capsys,
                                                                    monkeypatch):
    from meanfield.cli import inspect
    monkeypatch.setattr(inspect, "FOLLOW_WAIT", 0.3)
    part = tmp_path / "x.h5.part"
    t0 = time.monotonic()
    code = main(["inspect", str(part), "--follow", "--interval", "0.05"])
    assert time.monotonic() - t0 >= 0.3
    out = capsys.readouterr()
    assert code == 2 and out.out == f"waiting for {part} to appear\n"
    assert out.err == (f"meanfield: error: {part}: no such file: it did not appear within "
                       f"0.3 s; start the run first (meanfield run CONFIG -o "
                       f"{tmp_path / 'x.h5'}) or check the path\n")


def test_follow_waits_for_the_part_to_appear(tmp_path, capsys, monkeypatch, tiny_run_file):
    from meanfield.cli import inspect
    monkeypatch.setattr(inspect, "FOLLOW_WAIT", 60.0)
    part = tmp_path / "x.h5.part"
    # a complete run file appears under the .part name after a while (as a writer's
    # finished but not yet renamed file does)
    later = threading.Timer(0.5, shutil.copyfile, (tiny_run_file[1], part))
    later.start()
    try:
        code = main(["inspect", str(part), "--follow", "--interval", "0.05"])
    finally:
        later.join()
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0] == f"waiting for {part} to appear"
    assert lines[-1] == f"complete: {part}" and len(lines) == 3


def test_follow_of_a_file_that_is_no_run_file_gives_up_with_its_reason(tmp_path, capsys,
                                                                       monkeypatch):
    """A file that stays unreadable as a run file (here a CSV under a run file's name) ends
    ``--follow`` with the reader's one-line reason after ``FOLLOW_UNREADABLE`` seconds
    (it polled forever)."""
    from meanfield.cli import inspect
    monkeypatch.setattr(inspect, "FOLLOW_UNREADABLE", 0.3)
    bad = tmp_path / "x.h5"
    bad.write_text("x,y\n1,2\n")
    t0 = time.monotonic()
    code = main(["inspect", str(bad), "--follow", "--interval", "0.05"])
    assert 0.3 <= time.monotonic() - t0 < 30
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(bad) in err, err


def test_run_help_names_every_config_key_and_cli_md_documents_each(capsys):
    """``run --help`` lists the keys of every table from the schema, and docs/cli.md's
    config section has a row for each (a key added to the schema without its row fails)."""
    import re
    from pathlib import Path

    from meanfield.schema import SECTIONS, table_keys
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    doc = doc[doc.index("## Config files (TOML)"):]
    for sec in SECTIONS:
        listed = re.search(rf"\[{sec}\] ([^;.]*)", text)
        assert listed is not None, sec
        assert sorted(listed.group(1).split(", ")) == sorted(table_keys(sec)), sec
        table = doc[doc.index(f"### `[{sec}]`"):]
        table = table[:table.index("\n### ")] if "\n### " in table else table
        rows = {k for cell in re.findall(r"^\| ([^|]*) \|", table, flags=re.M)
                for k in re.findall(r"`([A-Za-z_]+)`", cell)}         # "`d`, `norm`" rows
        assert set(table_keys(sec)) <= rows, (sec, set(table_keys(sec)) - rows)


def test_run_ends_with_a_note_per_auto_stage_whose_budget_ran_out(tmp_path, capsys, one_thread):
    """A newcomer's "auto" run that spent its budget said only "wrote"; the verdict was in
    ``inspect``. Now each such stage gets one note with the verdict's first reason; a
    fixed-length ladder gets none (its stages do not wait for a verdict)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nkind = "two_point"\n[model]\nn_particles = 50\n[dynamics]\n'
                   'lam = 0.1\nintegrator = "mala"\neta = 0.2\ntaus = [1e-2, 1e-3]\n'
                   'chains = 2\nsteps_per_tau = "auto"\nmax_steps_per_tau = 32\n')
    out = tmp_path / "c.h5"
    assert main(["run", str(cfg), "-o", str(out), "--quiet", "--threads", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"meanfield: wrote {out} in ")
    assert [ln.split(" is ")[0] for ln in err[1:]] == [
        "meanfield: note: tau=1.0e-02", "meanfield: note: tau=1.0e-03"]
    assert all("max_steps_per_tau = 32: too few observations" in ln for ln in err[1:])
    # the exact sampler on ReLU without exchange moves is told of them; with them, not
    assert all("dynamics.exchange = 1" in ln for ln in err[1:])
    cfg.write_text(cfg.read_text() + "exchange = 1.0\n")
    assert main(["run", str(cfg), "-o", str(out), "--quiet", "--threads", "1",
                 "--overwrite"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and not any("dynamics.exchange" in ln for ln in err)
    fixed = tmp_path / "f.toml"
    fixed.write_text(tiny_toml())
    assert main(["run", str(fixed), "-o", str(tmp_path / "f.h5"), "--quiet",
                 "--threads", "1"]) == 0
    assert len(capsys.readouterr().err.splitlines()) == 1
