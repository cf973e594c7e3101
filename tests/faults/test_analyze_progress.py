"""``meanfield analyze``'s progress must cover all of its work: it reaches 100 % and then
draws its figures for 20-50 s without a word. Every figure written, and ``report.md``, must
come before the last progress line, which must be the one at 100 %.

The bar is made and advanced in :func:`meanfield.report.analyze_run`: one part per figure
and one for ``report.md`` count in its total, and ``write_report`` runs inside it."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow


class _Events:
    """A stderr that records each line written, in order with the files saved."""

    def __init__(self, events):
        self.events = events

    def write(self, text):
        for line in text.splitlines():
            if line.strip():
                self.events.append(("line", line))
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


def test_no_work_after_the_bar_reaches_100_percent(tiny_run_file, tmp_path, monkeypatch,
                                                   one_thread):
    from meanfield import atomic, progress, report
    _, run = tiny_run_file
    events = []
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)         # a line at every update
    monkeypatch.setattr(sys, "stderr", _Events(events))
    save, write_text = report.plots.save, atomic.write_text

    def saving(fig, path, *a, **k):
        events.append(("file", str(path)))
        return save(fig, path, *a, **k)

    def writing(path, *a, **k):
        events.append(("file", str(path)))
        return write_text(path, *a, **k)

    monkeypatch.setattr(report.plots, "save", saving)
    monkeypatch.setattr(report.atomic, "write_text", writing)
    report.analyze_run(run, tmp_path / "rep", progress=True, references=False,
                       sensitivity=False)
    lines = [i for i, (kind, _) in enumerate(events) if kind == "line"]
    files = [i for i, (kind, _) in enumerate(events) if kind == "file"]
    assert files and lines, events
    names = [events[i][1] for i in files]
    assert any(n.endswith(".png") for n in names) and names[-1].endswith("report.md"), names
    last = events[lines[-1]][1]
    assert "(100%)" in last, events
    assert max(files) < lines[-1], events            # nothing written after the last line
    first_full = next(i for i in lines if "(100%)" in events[i][1])
    assert first_full == lines[-1], events           # the bar is at 100 % only at the end
