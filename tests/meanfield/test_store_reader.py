"""``open_run``'s ``Run``: a one-line ``repr`` and the ``with`` statement."""

import pytest
from conftest import run_one_thread, tiny_toml

from meanfield.store import open_run


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    return run_one_thread(tiny_toml(), tmp_path_factory.mktemp("reader"))


def test_repr_is_one_line_of_sizes_not_arrays(run_file):
    run = open_run(run_file)
    text = repr(run)
    # TINY: five points in the plane, 64 particles, two stages with three snapshots each
    rows = len(run.observables["risk"]["step"])
    assert rows > 0
    assert text == (f"Run({str(run_file)!r}, n=5, d=2, particles=64, stages=2, frames=6, "
                    f"observations={rows}, complete=True)")
    assert "\n" not in text and "array" not in text
    assert text == str(run)


def test_repr_of_a_run_of_several_chains_names_them(tmp_path):
    run = open_run(run_one_thread(tiny_toml({"dynamics.chains": 2}), tmp_path))
    assert repr(run).startswith(f"Run({run.path!r}, chains=2, n=5, d=2, particles=64, ")
    assert repr(run.chain(1)).count("chains=") == 0        # a chain of its own is one run


def test_a_run_is_a_context_manager_that_holds_nothing_open(run_file):
    with open_run(run_file) as run:
        assert isinstance(run, type(open_run(run_file)))
        first = run.frame(0)
    assert (run.frame(0) == first).all()            # nothing was closed on leaving
    with pytest.raises(KeyError), open_run(run_file) as run:
        run.observables["no such observable"]       # an error inside is not swallowed
