"""Progress reports: a tqdm bar on a terminal, plain lines at most every 10 s otherwise (no
carriage returns in logs), nothing with --quiet; for run, sweep and highdim."""

from __future__ import annotations

import io

import pytest

from meanfield import progress as P


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_at_most_every_interval_with_rate_and_postfix():
    out, clock = io.StringIO(), Clock()
    bar = P.PlainProgress(1000, "run", "step", every=10.0, stream=out, clock=clock)
    for _ in range(30):                 # 30 updates of 10 steps, 1 s apart
        clock.t += 1.0
        bar.update(10)
        bar.set_postfix(tau="1.0e-02", risk="1.2e-01")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # t = 10, 20, 30 (updates at 100, 200, 300 steps); the close line repeats nothing new
    post = "  tau=1.0e-02 risk=1.2e-01"
    assert lines == ["run: 100/1000 steps (10%), 10 s, about 1 min 30 s left" + post,
                     "run: 200/1000 steps (20%), 20 s, about 1 min 20 s left" + post,
                     "run: 300/1000 steps (30%), 30 s, about 1 min 10 s left" + post]


def test_plain_lines_name_the_unit_in_the_plural():
    """The exact sampler counts passes, not "passs"."""
    out = io.StringIO()
    bar = P.PlainProgress(100, "run", "pass", stream=out, every=0)
    bar.update(10)
    bar.close()
    assert out.getvalue().startswith("run: 10/100 passes (10%)")


def test_plain_close_reports_the_end_and_a_resume_counts_only_new_work():
    out, clock = io.StringIO(), Clock()
    bar = P.PlainProgress(100, "run", "step", initial=50, every=10.0, stream=out, clock=clock)
    clock.t = 12.0
    bar.update(10)                      # 10 steps in 12 s: 40 left, about 48 s
    clock.t = 15.0
    bar.update(40)
    bar.close()
    bar.close()
    assert out.getvalue().splitlines() == ["run: 60/100 steps (60%), 12 s, about 48 s left",
                                           "run: 100/100 steps (100%), 15 s"]


def test_plain_short_work_and_failures_print_no_end_line():
    out, clock = io.StringIO(), Clock()
    with P.PlainProgress(10, "analyze", "part", every=10.0, stream=out, clock=clock) as bar:
        clock.t = 3.0
        bar.update(10)                  # done within the interval: nothing to report
    assert out.getvalue() == ""
    out, clock = io.StringIO(), Clock()
    try:
        with P.PlainProgress(10, "analyze", "part", every=10.0, stream=out, clock=clock) as bar:
            clock.t = 11.0
            bar.update(5)               # one line at t = 11
            clock.t = 12.0
            bar.update(1)
            raise OSError("disk full")
    except OSError:
        pass
    assert out.getvalue().splitlines() == ["analyze: 5/10 parts (50%), 11 s, about 11 s left"]


def test_terminal_gets_tqdm_and_quiet_gets_nothing():
    from tqdm import tqdm
    bar = P.progress_bar(10, "study", "job", stream=Tty())
    assert isinstance(bar, tqdm)
    bar.close()
    assert isinstance(P.progress_bar(10, "study", "job", stream=io.StringIO()),
                      P.PlainProgress)
    silent = P.progress_bar(10, "study", "job", enabled=False, stream=Tty())
    silent.update(3)
    silent.set_postfix({"done": 1})
    silent.close()


TINY = """\
[data]
kind = "gaussian"
n = 4
d = 1
[model]
n_particles = 20
[dynamics]
taus = [1e-2, 1e-3]
steps_per_tau = 400
[output]
observe_every = 100
"""


@pytest.mark.parametrize("quiet", [False, True])
def test_run_and_highdim_report_plain_lines_in_a_log(tmp_path, capsys, monkeypatch, quiet):
    from meanfield import cli
    monkeypatch.setattr(P, "PLAIN_EVERY", 0.0)      # a line at every update
    cfg = tmp_path / "t.toml"
    cfg.write_text(TINY)
    q = ["--quiet"] if quiet else []
    assert cli.main(["run", str(cfg), "-o", str(tmp_path / "t.h5"), "--threads", "1", *q]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("run: ")]
    assert "\r" not in err
    if quiet:
        assert not lines
    else:
        assert lines[-1].startswith("run: 800/800 steps (100%)")
        assert len(lines) >= 8 and "tau=1.0e-03" in lines[-1]
    assert cli.main(["highdim", "--neurons", "1", "--n", "4", "--d", "8,16", "--trials", "2",
                     "-o", str(tmp_path / "hd"), *q]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("highdim: ")]
    assert "\r" not in err
    assert (not lines) if quiet else lines[-1].startswith("highdim: 4/4 trials (100%)")


def test_run_says_it_compiles_when_preparing_the_kernels_is_slow(capsys, monkeypatch):
    """The kernels are prepared before the progress clock starts; a slow preparation (a first
    run compiling) is announced in one line, a fast one (numba's cache) or --quiet says
    nothing, and the particles are left as they were."""
    import time

    import numpy as np

    from meanfield.runner import loop
    from solvers.langevin import SolverState

    class Slow:
        integrator = "mala"
        kernel_name = "the exact sampler's kernel for ReLU, d = 2"

        def __init__(self, seconds):
            self.seconds = seconds

        def prepare(self, theta, step0):
            theta[:] = np.nan                     # must be a copy
            time.sleep(self.seconds)

    monkeypatch.setattr(loop, "COMPILE_NOTE_AFTER", 0.05)
    monkeypatch.setattr(loop, "COMPILE_HEARTBEAT", 0.2)
    state = SolverState(theta=np.ones((3, 4)))
    loop._warm_up(Slow(0.5), state, None)
    first, *beats = capsys.readouterr().err.splitlines()
    # what is compiled, why now, and the measured time of that integrator's kernel
    assert first == ("run: compiling the exact sampler's kernel for ReLU, d = 2 (numba; once per "
                     "installation, the first time a run needs it; about "
                     f"{loop.COMPILE_SECONDS['mala']} s on an idle 2-core machine)")
    # then a line every COMPILE_HEARTBEAT seconds with the time so far (at 0.25 and 0.45 s;
    # a loaded machine may wake the thread late, so at least one)
    assert beats
    assert all(b.startswith("run: still compiling, ") and b.endswith(" s so far")
               for b in beats)
    assert np.all(state.theta == 1.0)
    loop._warm_up(Slow(0.5), state, False)
    loop._warm_up(Slow(0.0), state, None)
    time.sleep(0.1)
    assert capsys.readouterr().err == ""
