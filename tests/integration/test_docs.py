"""Every ``THEORY §N`` / ``theory.md §N`` citation in the repository names a section of
``docs/theory.md``, and no file cites documents that the repository does not hold."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITE = re.compile(r"(?:THEORY|theory\.md)\s+((?:§\d+(?:\.\d+)?(?:\s*[–,-]\s*)?)+)")


def _files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    names = out.stdout.split() if out.returncode == 0 else []
    if not names:       # not a git checkout: every text file of the tree
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    return [ROOT / n for n in names
            if n.endswith((".py", ".md", ".toml", ".csv", ".cfg")) and (ROOT / n).is_file()]


def _sections():
    heads = re.findall(r"(?m)^#{2,3} (\d+(?:\.\d+)?)[. ]", (ROOT / "docs/theory.md").read_text())
    return set(heads)


def test_theory_citations_resolve():
    sections = _sections()
    assert {str(k) for k in range(1, 12)} <= sections
    bad = []
    for path in _files():
        for m in CITE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            for num in re.findall(r"§(\d+(?:\.\d+)?)", m.group(1)):
                if num not in sections:
                    bad.append(f"{path.relative_to(ROOT)}: §{num}")
    assert not bad, bad


def test_no_citation_of_absent_documents():
    """Every upper-case Markdown file name cited exists in the repository, and no note kept outside
    it is cited."""
    present = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    bad = []
    for p in _files():
        text = p.read_text(encoding="utf-8", errors="replace")
        bad += [f"{p.relative_to(ROOT)}: {m}" for m in re.findall(r"\b[A-Z][A-Z_]+\.md\b", text)
                if m not in present]
        if p.name != "test_docs.py" and re.search(r"engineering (notes|\.md)", text):
            bad.append(f"{p.relative_to(ROOT)}: notes kept outside the repository")
    assert not bad, bad
