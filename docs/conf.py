"""Sphinx configuration of shardpipe's documentation site.

Built by ``./dev.sh test`` as ``sphinx-build -W --keep-going -n -b html docs
docs/_build/html``: warnings are errors and every cross-reference must
resolve. Nothing is fetched from the network (no intersphinx): references to
other projects' objects are let through by the narrow patterns of
``nitpick_ignore_regex`` below.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypeAliasType

from sphinx.application import Sphinx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import shardpipe  # noqa: E402

project = "shardpipe"
author = "the shardpipe authors"
copyright = "the shardpipe authors, MIT licence"
release = shardpipe.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "cli_reference",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
# The guides' toctree lists the guides in reading order, then ``guides/*`` for a guide
# added since (another branch's page appears without editing index.md); the pattern
# matches nothing while every guide is listed, which is not a mistake.
suppress_warnings = ["toc.empty_glob"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# options such as --icechunk stay as typed (no en dashes, no curly quotes)
smartquotes = False

html_theme = "alabaster"
html_title = f"shardpipe {release}"
html_static_path: list[str] = []

# -- API reference ------------------------------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options: dict[str, object] = {}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_param = False
napoleon_use_rtype = False
napoleon_use_ivar = False

nitpicky = True

# Objects of Python and of the projects shardpipe builds on. Without intersphinx (the
# build must not touch the network) Sphinx cannot resolve them; they are let through by
# module, and every reference to a shardpipe object must still resolve.
_STDLIB = (
    "abc|argparse|asyncio|collections|concurrent|contextlib|dataclasses|enum|gzip|io|logging|"
    "os|pathlib|random|socket|threading|types|typing|zlib"
)
_THIRD_PARTY = (
    "_pytest|aiohttp|botocore|dask|distributed|fsspec|hypothesis|icechunk|numcodecs|numpy|np|"
    "pytest|s3fs|tqdm|xarray|xr|zarr|da|azure|adlfs"
)
_BUILTINS = (
    "bool|bytearray|bytes|complex|dict|float|frozenset|int|list|memoryview|object|set|"
    "slice|str|tuple|type|BaseException|Exception|OSError|ValueError|TypeError|KeyError|"
    "FileExistsError|FileNotFoundError|PermissionError|NotImplementedError|RuntimeError"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({_STDLIB}|{_THIRD_PARTY})(\..+)?"),
    (r"py:.*", rf"({_BUILTINS})"),
    # names zarr and icechunk types are imported as, seen in annotations that autodoc
    # cannot evaluate (imports under TYPE_CHECKING)
    (r"py:class", r"(ArrayV3Metadata|ForkSession|GroupMetadata|Session|Storage|Store)"),
    # shardpipe's own type aliases, in the same unevaluated annotations (``Shape`` is
    # ``tuple[int, ...]``), and the one whose value autodoc cannot evaluate (see
    # _skip_unevaluable_alias below)
    (r"py:class", r"(Coords|IndexLocation|Resume|Shape|shardpipe\.cli\.subcommand\.Subcommands)"),
    # a literal value in a type description: ``bool or "force"``
    (r"py:class", r'"[a-z_]+"'),
    # type parameters of generic functions and classes (``def f[T](...)``)
    (r"py:class", r"([a-z_.]+\.)?[A-Z]"),
    # the words of numpydoc type descriptions ("mapping of str to int", "bytes-like"),
    # which Sphinx splits at "of" and "or" and looks up as if they were names
    (r"py:class", r"[^.]*[ '-][^.]*"),
    (r"py:class", r"(mapping|callable|iterable|sequence|optional|array-like)"),
    # annotations of builtin generics that Sphinx cannot split, e.g. ``dict[str, Any]``
    # in a dataclass field's type
    (r"py:class", r"(dict|frozenset|list|set|tuple)\[.*"),
]


def _skip_unevaluable_alias(
    app: object, what: str, name: str, obj: object, skip: bool, options: object
) -> bool | None:
    """Leave out a ``type`` alias whose value cannot be evaluated at run time.

    ``type Subcommands = argparse._SubParsersAction[...]`` is fine for mypy and
    never evaluated by Python, but autodoc evaluates it to show it, and
    ``_SubParsersAction`` is not subscriptable before Python 3.13.
    """
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith("Alias for field"):
        return True  # a NamedTuple's field: its class docstring describes it
    if isinstance(obj, TypeAliasType):
        try:
            obj.__value__  # noqa: B018
        except TypeError:
            return True
    return None


_PROSE: dict[str, list[str]] = {}


def _keep_prose(
    app: object, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """Keep the docstring of an attribute as written, away from napoleon.

    napoleon reads the first line of an attribute's docstring as ``type: text``
    when it has a colon, so ``"Bytes written between two requests: ..."`` would
    become a reference to a class named "Bytes written between two requests".
    Attribute docstrings here are prose; :func:`_restore_prose` puts it back
    after napoleon ran.
    """
    if what in ("attribute", "data", "property"):
        _PROSE[name] = list(lines)


def _restore_prose(
    app: object, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    if name in _PROSE:
        lines[:] = _PROSE.pop(name)


def setup(app: Sphinx) -> None:
    app.connect("autodoc-skip-member", _skip_unevaluable_alias)
    app.connect("autodoc-process-docstring", _keep_prose, priority=100)
    app.connect("autodoc-process-docstring", _restore_prose, priority=900)
