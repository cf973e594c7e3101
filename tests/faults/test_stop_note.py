"""The note ``meanfield run`` prints on SIGINT/SIGTERM says where the run stops, and it stops
there.

The solver steps a chunk at a time, from one observation boundary to the next, in one call of
a compiled kernel; a stop request takes effect at the end of the chunk it arrived in. The note
said "at the next observation boundary" while a run with ``observe_every = 20000`` went on for
13 300 more steps, a distance it did not give. It now names the step it stops at and how far
that is; the checkpoint is written at that very step.
"""

from __future__ import annotations

import re
import signal
import time

import pytest
from support import start

pytestmark = pytest.mark.slow

LONG = """\
[data]
kind = "gaussian"
n = 6
d = 2
seed = 1
[model]
n_particles = 100
[dynamics]
lam = 0.05
eta = 0.05
taus = [1e-2]
steps_per_tau = 4000000
seed = 3
chains = {chains}
[output]
observe_every = {every}
snapshots_per_tau = 2
checkpoint_every = 100000000
"""

NOTE = re.compile(r"^meanfield: (SIGINT|SIGTERM): writing a checkpoint at step (\d+), the end of "
                  r"the chunk the run is computing \((\d+) steps on from step (\d+); an "
                  r"observation every (\d+) steps, output.observe_every\), and stopping there "
                  r"\(signal again to abort\)$")


@pytest.mark.parametrize("chains, sig", [(1, signal.SIGINT), (2, signal.SIGTERM)])
def test_the_note_names_the_step_the_run_stops_at(tmp_path, chains, sig):
    every = 200000
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG.format(chains=chains, every=every))
    out = tmp_path / "long.h5"
    p = start(["run", cfg, "-o", out, "--quiet", "--threads", "1"], tmp_path)
    part = out.with_name("long.h5.part")
    t_end = time.monotonic() + 180
    while not part.exists() and p.poll() is None and time.monotonic() < t_end:
        time.sleep(0.01)
    time.sleep(1.0)                        # into the ladder
    p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    m = NOTE.match(lines[0])
    assert m, err
    stop, gap, last, said_every = (int(m[k]) for k in (2, 3, 4, 5))
    assert said_every == every and stop - last == gap and 0 < gap <= every, err
    assert stop % every == 0 or stop == 2000000, err           # a boundary of the ladder
    assert re.match(rf"^meanfield: interrupted at step {stop}; checkpoint ", lines[-1]), err
    from meanfield import checkpoint
    from solvers.langevin import SolverState
    states, _ = checkpoint.load_chains(out.with_name("long.h5.ckpt"), SolverState)
    assert [st.step for st in states] == [stop] * chains
