"""Driving a study (``meanfield/sweep/execute.py``): the shutdown of a local Dask cluster after
an interrupt is quiet. Dask's distributed logs the tasks it cancels and the workers it kills as
warnings; after Ctrl-C (or SIGTERM, SIGHUP) its loggers, in the driver and in the workers, say
nothing while the cluster closes, and have their levels back afterwards; at any other end of
the cluster they speak as usual. A stand-in cluster and client log what the real ones log while
they close, so no cluster is started."""

from __future__ import annotations

import logging

import pytest

distributed = pytest.importorskip("distributed")

from meanfield.interrupts import Terminated  # noqa: E402
from meanfield.sweep import execute  # noqa: E402

#: What distributed's loggers said while a real local cluster closed under Ctrl-C (driver:
#: the nanny; workers: the state machine), and a logger Dask's config gives a level of its own.
CLOSING = (("distributed.worker.state_machine", "Async instruction for <Task cancelled "
            "name=\"execute('job')\"> ended with CancelledError"),
           ("distributed.nanny", "Worker process still alive after 4.0 seconds, killing"),
           ("distributed.client", "closing the client"))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append((record.name, record.getMessage()))


@pytest.fixture
def heard(monkeypatch):
    """What each logger of :data:`CLOSING` and the project's ``meanfield.sweep`` let through,
    with the levels they had put back at the end; ``distributed.client`` at an explicit WARNING
    as Dask's logging config sets it."""
    names = [n for n, _ in CLOSING] + ["meanfield.sweep"]
    logs = [logging.getLogger(n) for n in names]
    before = [(log.level, log.propagate) for log in logs]
    rec = _Records()
    for log in logs:
        log.addHandler(rec)
        log.propagate = False                    # heard here only, not on the terminal
    logging.getLogger("distributed.client").setLevel(logging.WARNING)
    yield rec
    for log, (level, propagate) in zip(logs, before):
        log.removeHandler(rec)
        log.setLevel(level)
        log.propagate = propagate


class _Cluster:
    preload: list = []

    def __init__(self, **kw):
        import dask
        _Cluster.preload = list(dask.config.get("distributed.worker.preload"))

    def close(self):
        for name, text in CLOSING[1:2]:
            logging.getLogger(name).warning(text)
        logging.getLogger("meanfield.sweep").warning("the project's own line")


class _Client:
    made: list = []

    def __init__(self, cluster):
        self.ran = []
        _Client.made.append(self)

    def run(self, fn, **kw):
        self.ran.append(fn)                     # in each worker's process

    def close(self):
        for name, text in CLOSING[:1] + CLOSING[2:]:
            logging.getLogger(name).warning(text)


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr(distributed, "LocalCluster", _Cluster)
    monkeypatch.setattr(distributed, "Client", _Client)
    _Client.made = []
    return _Client.made


def _levels():
    return {n: logging.getLogger(n).level for n, _ in CLOSING}


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated(15)],
                         ids=["ctrl-c", "sigterm"])
def test_the_shutdown_after_an_interrupt_says_nothing_from_distributed(heard, stand_ins, stop):
    levels = _levels()
    with pytest.raises(KeyboardInterrupt) as caught:
        with execute._client(2, None, None, 2, threads=1):
            raise stop
    assert caught.value is stop
    assert heard.messages == [("meanfield.sweep", "the project's own line")]
    (client,) = stand_ins
    assert client.ran == [execute.silence_distributed]      # and the workers' loggers too
    assert _levels() == levels                              # put back once it is closed
    assert _Cluster.preload[-1] == execute.__name__         # its workers' own Ctrl-C: below


def test_another_end_of_the_cluster_leaves_distributed_heard(heard, stand_ins):
    with pytest.raises(RuntimeError):
        with execute._client(2, None, None, 2, threads=1):
            raise RuntimeError("a bug")
    with execute._client(2, None, None, 2, threads=1):
        pass
    want = [CLOSING[0], CLOSING[2], CLOSING[1], ("meanfield.sweep", "the project's own line")]
    assert heard.messages == want * 2
    assert all(c.ran == [] for c in stand_ins)


def test_silence_distributed_covers_its_loggers_only_and_restores_them(heard):
    levels = _levels()
    old = execute.silence_distributed()
    for name, text in CLOSING:
        logging.getLogger(name).error(text)
    assert not logging.getLogger("distributed.made_later").isEnabledFor(logging.CRITICAL)
    logging.getLogger("meanfield.sweep").warning("kept")
    assert heard.messages == [("meanfield.sweep", "kept")]
    execute.restore_levels(old)
    assert _levels() == levels
    logging.getLogger("distributed.client").warning("heard again")
    assert heard.messages[-1] == ("distributed.client", "heard again")


@pytest.fixture
def sigint_kept():
    """SIGINT's handler and distributed's logger levels as they were, after the test."""
    import signal
    old = signal.getsignal(signal.SIGINT)
    levels = {**_levels(), "distributed": logging.getLogger("distributed").level}
    yield
    signal.signal(signal.SIGINT, old)
    execute.restore_levels(levels)


def test_a_worker_interrupted_by_ctrl_c_silences_its_loggers_first(heard, sigint_kept):
    """The preload hook of the local cluster's workers (``dask_setup``, in each worker's main
    thread): SIGINT silences distributed's loggers and then raises ``KeyboardInterrupt`` as
    before; until then they speak."""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    execute.dask_setup(None)
    logging.getLogger("distributed.nanny").warning("before")
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    for name, text in CLOSING:
        logging.getLogger(name).warning(text)
    assert heard.messages == [("distributed.nanny", "before")]


def test_a_worker_whose_sigint_is_ignored_keeps_it_ignored(sigint_kept):
    import signal
    for disposition in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, disposition)
        execute.dask_setup(None)
        assert signal.getsignal(signal.SIGINT) is disposition
