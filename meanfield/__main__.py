"""``python -m meanfield``: the command line, immune to a stray ``analysis.py`` or ``solvers.py``.

``python -m`` puts the current folder first on ``sys.path``, where a user's own ``analysis.py``
or ``solvers.py`` would shadow the project's top-level packages of those names. The current
folder is dropped unless it is the one that holds the project; a collision that remains (the
stray module reached through ``PYTHONPATH``) ends in one line and exit code 2.
"""

import importlib.util
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent       # the folder holding the three packages

if sys.path and sys.path[0] in ("", os.getcwd()) and Path.cwd().resolve() != _ROOT:
    del sys.path[0]

for _name in ("solvers", "analysis"):
    _spec = importlib.util.find_spec(_name)
    _origin = Path(_spec.origin).resolve() if _spec and _spec.origin else None
    if _origin is None or _origin.parent.parent != _ROOT:
        # one line whatever the path holds (solvers.errors.one_line cannot be imported here)
        _where = str(_origin or _name).encode("unicode_escape").decode("ascii")
        sys.stderr.write(f"meanfield: error: {_where}: shadows the package "
                         f"'{_name}' that meanfield needs; rename or move it\n")
        sys.exit(2)

from meanfield.cli import main  # noqa: E402  (after the path check above)

sys.exit(main())
