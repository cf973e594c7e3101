"""The printed outputs of ``docs/tutorial.md`` are what the code prints: the example script's
output (section 1) and the output blocks of the Python steps (section 3) are regenerated and
compared, so the tutorial cannot drift from the code.

Timings (``35 s``) and the output folder are masked; every other character must match, except
that numbers printed with more than 8 significant digits are compared to a relative 1e-9.
With ``MEANFIELD_REGENERATE_DOCS=1`` the long tests write what the code printed into the
tutorial's blocks instead of comparing (then review the diff and the prose around them).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
REGENERATE = os.environ.get("MEANFIELD_REGENERATE_DOCS") == "1"
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def blocks(text: str):
    """The fenced blocks of a Markdown text: list of ``(info, body)``."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)]


def script_output_block(text: str) -> str:
    """The example script's printed output: the first plain block of section 1."""
    sec = text[text.index("## 1. Run the study"):text.index("## 2.")]
    return next(body for info, body in blocks(sec) if info == "")


def python_steps(text: str):
    """Section 3's Python blocks, each with the plain output block that follows it (or
    ``None``)."""
    sec = text[text.index("## 3."):text.index("## 4.")]
    out, bl = [], blocks(sec)
    for i, (info, body) in enumerate(bl):
        if info == "python":
            nxt = bl[i + 1] if i + 1 < len(bl) else None
            out.append((body, nxt[1] if nxt is not None and nxt[0] == "" else None))
    return out


def replace_plain_blocks(text: str, start: str, end: str, bodies: list) -> str:
    """``text`` with the plain fenced blocks between the headings ``start`` and ``end``
    replaced, in order, by ``bodies`` (``None``: left as it is)."""
    a, b = text.index(start), text.index(end)
    sec, k = text[a:b], iter(bodies)

    def sub(m):
        if m.group(1) != "":
            return m.group(0)
        body = next(k, None)
        return m.group(0) if body is None else "```\n" + body.rstrip("\n") + "\n```"
    return text[:a] + re.sub(r"^```(\w*)\n(.*?)^```$", sub, sec, flags=re.S | re.M) + text[b:]


def _mask(line: str) -> str:
    return re.sub(r"\b\d+ s\b", "<t> s", line)


def _numbers_match(want: str, got: str) -> bool:
    a, b = NUMBER.split(want), NUMBER.split(got)
    if a != b:
        return False
    for x, y in zip(NUMBER.findall(want), NUMBER.findall(got)):
        digits = len(re.sub(r"[^0-9]", "", x.split("e")[0].split("E")[0]).lstrip("0"))
        if digits <= 8:
            if x != y:
                return False
        elif abs(float(x) - float(y)) > 1e-9 * abs(float(x)):
            return False
    return True


def assert_same_output(want: str, got: str, what: str):
    w = [_mask(ln.rstrip()) for ln in want.strip("\n").splitlines()]
    g = [_mask(ln.rstrip()) for ln in got.strip("\n").splitlines()]
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(w, g)) if not _numbers_match(a, b)]
    assert len(w) == len(g) and not bad, (
        f"{what}: docs/tutorial.md shows\n{want}\nthe code prints\n{got}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder where the tutorial's relative paths work: ``data`` points at the shipped
    data, ``lowtemp-study`` is written there."""
    d = tmp_path_factory.mktemp("tutorial")
    (d / "data").symlink_to(REPO / "data")
    return d


@pytest.mark.long
@pytest.mark.slow
def test_script_output_is_the_tutorials(workdir):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, str(REPO / "examples" / "low_temperature_study.py"),
                          "lowtemp-study/", "--threads", "1"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=1800, check=False)
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr               # progress in a log: plain lines
    if REGENERATE:
        TUTORIAL.write_text(replace_plain_blocks(TUTORIAL.read_text(), "## 1. Run the study",
                                                 "## 2.", [out.stdout]))
        return
    assert_same_output(script_output_block(TUTORIAL.read_text()), out.stdout,
                       "examples/low_temperature_study.py")


@pytest.mark.long
@pytest.mark.slow
def test_python_steps_print_what_the_tutorial_shows(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    namespace: dict = {}
    steps = python_steps(TUTORIAL.read_text())
    assert len(steps) >= 4
    printed = []
    for code, shown in steps:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "docs/tutorial.md", "exec"), namespace)  # noqa: S102
        if shown is not None:
            printed.append(buf.getvalue())
        if REGENERATE:
            continue
        if shown is not None:
            assert_same_output(shown, buf.getvalue(), code.strip().splitlines()[0])
        # inline "print(...)   # expected, then a remark" comments: the comment starts with
        # what the line prints
        for line, got in zip([ln for ln in code.splitlines() if ln.startswith("print(")
                              and "#" in ln], buf.getvalue().splitlines()):
            if shown is None:
                comment = line.split("#", 1)[1].strip()
                assert_same_output(comment[:len(got.strip())], got.strip(), line)
    if REGENERATE:          # the output blocks; the inline comments are prose, edited by hand
        TUTORIAL.write_text(replace_plain_blocks(TUTORIAL.read_text(), "## 3.", "## 4.",
                                                 printed))


def test_the_tutorial_parses():
    """The fast half: the blocks this test compares exist where it looks for them, and the
    regeneration writes a block back where it was read."""
    text = TUTORIAL.read_text()
    again = replace_plain_blocks(text, "## 1. Run the study", "## 2.",
                                 [script_output_block(text)])
    assert again == text
    other = replace_plain_blocks(text, "## 1. Run the study", "## 2.", ["run: x\n"])
    assert script_output_block(other) == "run: x\n" and other.count("```") == text.count("```")
    assert script_output_block(text).startswith("run: ")
    steps = python_steps(text)
    assert sum(shown is not None for _, shown in steps) >= 2
    assert _numbers_match("x = 0.9999999568674598", "x = 0.9999999568674597")
    assert not _numbers_match("J = 5", "J = 4")
    assert _mask("run: a.h5 (35 s)") == "run: a.h5 (<t> s)"
