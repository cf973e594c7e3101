"""MkDocs hook of the documentation site (``hooks:`` in ``mkdocs.yml``): writes the API pages.

Each package root (``meanfield``, ``analysis``, ``solvers``) exports its public names through a
lazy table, ``_EXPORTS = {"name": "module:attribute", ...}``, and ``__all__`` (PEP 562,
``solvers/lazy.py``). Griffe, which mkdocstrings uses to read the code, analyses it statically
and cannot follow such a table, so every page entry names the defining object
(``::: solvers.gibbs.gibbs``). The pages ``api/<package>.md`` are generated at build time from
those tables, read from the checkout's source like griffe reads it, so a name added to a table
is documented without editing any page, and nothing here imports the packages.

:func:`api_pages` returns the pages as text (``tests/integration/test_docs.py`` checks them
against the installed packages); :func:`on_files` adds them to the build.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: The package roots whose exports the API pages document, in the order of the site's nav.
PACKAGES = ("meanfield", "analysis", "solvers")

#: A Sphinx cross-reference role of a docstring as Markdown renders it: ``:func:`x``` becomes
#: ``:func:<code>x</code>``, and stays ``:data:`x``` inside a code span (a parameter's type).
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):(?:(<code>)~?|`~?([^`<]*)`)")

#: Names of ``__all__`` that are not in the export table, with what the page says of them.
PLAIN = {"__version__": "the version string of the installed package."}


def export_table(root: Path, package: str) -> tuple[dict[str, str], list[str]]:
    """The export table and ``__all__`` of ``package``, read from its ``__init__.py``.

    Parameters
    ----------
    root : Path
        The repository root.
    package : str
        The package's name, a folder of ``root``.

    Returns
    -------
    (dict, list)
        ``_EXPORTS`` (public name -> ``"module:attribute"``) and the names of ``__all__``.

    Raises
    ------
    ValueError
        If ``__init__.py`` has no literal ``_EXPORTS`` dict, or an ``__all__`` other than a
        list of strings and starred tables, or ``list(_EXPORTS)``.
    """
    source = root / package / "__init__.py"
    table: dict[str, str] | None = None
    names: list[str] | None = None
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        target, value = node.targets[0].id, node.value
        if target == "_EXPORTS":
            table = ast.literal_eval(value)
        elif target == "__all__":
            names = _names(value, table or {}, source)
    if table is None or names is None:
        raise ValueError(f"{source}: no literal _EXPORTS dict and __all__ list")
    return table, names


def _names(node: ast.expr, table: dict[str, str], source: Path) -> list[str]:
    """The strings of an ``__all__`` expression: ``[..., *_EXPORTS]`` or ``list(_EXPORTS)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "list" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "_EXPORTS"):
        return list(table)
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list[str] = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.append(elt.value)
            elif (isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name)
                  and elt.value.id == "_EXPORTS"):
                out.extend(table)
            else:
                break
        else:
            return out
    raise ValueError(f"{source}: __all__ is not a list of strings and *_EXPORTS")


def identifier(target: str) -> str:
    """The dotted path of an export table entry: ``"solvers.gibbs:gibbs"`` -> ``"solvers.gibbs.gibbs"``."""
    module, _, attr = target.partition(":")
    return f"{module}.{attr}"


def api_page(root: Path, package: str) -> str:
    """The Markdown of the API page of ``package``: its docstring, then every exported name.

    Parameters
    ----------
    root : Path
        The repository root.
    package : str
        The package's name.

    Returns
    -------
    str
        The page: a table of the public names and where each is defined, the package docstring,
        and one mkdocstrings entry (``::: module.attribute``, headed by the public name) per
        name of the export table, in the table's order.

    Raises
    ------
    ValueError
        As :func:`export_table`, or for a name of ``__all__`` that is neither in the export
        table nor in :data:`PLAIN`.
    """
    table, names = export_table(root, package)
    unknown = [n for n in names if n not in table and n not in PLAIN]
    if unknown:
        raise ValueError(f"{package}.__all__ names {unknown}, neither exported lazily nor "
                         "described in mkdocs_hooks.PLAIN")
    lines = [
        f"# `{package}`",
        "",
        f"<!-- Generated at build time by mkdocs_hooks.py from the export table of "
        f"{package}/__init__.py; do not edit. -->",
        "",
        f"Every public name of `{package}` (its `__all__`), with its docstring. The names are "
        f"imported lazily from the modules that define them: `{package}.NAME` is the object "
        "documented under *defined as*.",
        "",
        "| name | defined as |",
        "|---|---|",
    ]
    for name in names:
        if name in table:
            ident = identifier(table[name])
            lines.append(f"| [`{package}.{name}`](#{ident}) | `{ident}` |")
        else:
            lines.append(f"| `{package}.{name}` | {PLAIN[name]} |")
    lines += ["", "## The package", "", f"::: {package}", "    options:",
              "      show_root_heading: false", "      members: false", ""]
    lines += ["## Exported names", ""]
    for name in names:
        if name in table:
            lines += [f"::: {identifier(table[name])}", "    options:",
                      f'      heading: "{package}.{name}"', f'      toc_label: "{name}"', ""]
    return "\n".join(lines)


def api_pages(root: Path) -> dict[str, str]:
    """The generated pages, ``{"api/<package>.md": markdown}``, of every package root.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    dict
        Page path (relative to ``docs/``) -> Markdown, in the order of :data:`PACKAGES`.
    """
    return {f"api/{p}.md": api_page(root, p) for p in PACKAGES}


def on_files(files, config):
    """MkDocs event: add the generated API pages to the site's files.

    Parameters
    ----------
    files : mkdocs.structure.files.Files
        The files of ``docs_dir``.
    config : mkdocs.config.defaults.MkDocsConfig
        The site's configuration (its ``config_file_path`` locates the repository root).

    Returns
    -------
    mkdocs.structure.files.Files
        ``files`` with the API pages added.

    Raises
    ------
    mkdocs.exceptions.PluginError
        If ``docs/`` holds a page of the same path as a generated one.
    """
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    root = Path(config.config_file_path).resolve().parent
    for uri, text in api_pages(root).items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists: the API pages are generated (mkdocs_hooks.py)")
        files.append(File.generated(config, uri, content=text))
    return files


def on_page_content(html, page, config, files):
    """MkDocs event: on the API pages, render the docstrings' Sphinx roles as plain code.

    The numpydoc docstrings cite other objects as ``:func:`name``` (for the Sphinx-style reader
    of the source); the page shows ``name`` in code, without the role.

    Parameters
    ----------
    html : str
        The page's HTML body.
    page : mkdocs.structure.pages.Page
        The page.
    config : mkdocs.config.defaults.MkDocsConfig
        The site's configuration.
    files : mkdocs.structure.files.Files
        The site's files.

    Returns
    -------
    str
        ``html``, with the roles removed on the generated API pages.
    """
    if not page.file.src_uri.startswith("api/"):
        return html
    return ROLE.sub(lambda m: m.group(1) or m.group(2), html)
