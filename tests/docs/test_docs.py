"""The documentation covers what it claims to: every public name, every command, the layers.

``./dev.sh test`` builds the site with warnings as errors (every cross-reference
resolves); these tests check what a build cannot see: that nothing public is left
out of the reference, that the CLI reference covers every option of every
command, that the architecture page follows the layer contract, and that the
README's first screen works when pasted.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import shardpipe
import shardpipe.errors
from shardpipe.cli.exit_statuses import statuses_markdown
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer

DOCS = REPOSITORY / "docs"
README = REPOSITORY / "README.md"


def _cli_reference() -> ModuleType:
    """The Sphinx extension that generates the CLI reference (it needs no Sphinx)."""
    path = DOCS / "_ext" / "cli_reference.py"
    spec = importlib.util.spec_from_file_location("cli_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_block(markdown: str, contains: str) -> str:
    """The first ```python block of ``markdown`` that contains ``contains``."""
    blocks = re.findall(r"```python\n(.*?)```", markdown, re.S)
    return next(b for b in blocks if contains in b)


def test_every_public_name_is_in_the_api_reference() -> None:
    page = (DOCS / "api" / "public.rst").read_text()
    documented = set(re.findall(r"^\.\. auto(?:function|class):: (\w+)$", page, re.M))
    listed_errors = set(re.findall(r":exc:`~shardpipe\.errors\.(\w+)`", page))
    missing = [n for n in shardpipe.__all__ if n not in documented | listed_errors]
    assert not missing, f"public names missing from docs/api/public.rst: {missing}"
    not_public = sorted((documented | listed_errors) - set(shardpipe.__all__))
    assert not not_public, f"docs/api/public.rst documents names not in __all__: {not_public}"


def test_every_error_is_a_public_name_and_documented() -> None:
    page = (DOCS / "api" / "errors.rst").read_text()
    assert ".. automodule:: shardpipe.errors" in page and ":members:" in page
    classes = [
        name
        for name, obj in vars(shardpipe.errors).items()
        if isinstance(obj, type) and issubclass(obj, shardpipe.errors.ShardpipeError)
    ]
    assert [c for c in classes if c not in shardpipe.__all__] == []


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [
        flag
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
    ]


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    module = _cli_reference()
    assert module.PLACEHOLDER in (DOCS / "cli.md").read_text()
    text = module.cli_reference_markdown()
    parsers = module.command_parsers()
    assert len(parsers) >= 11
    sections = re.split(r"^## ", text, flags=re.M)
    by_title = {s.splitlines()[0]: s for s in sections if s}
    for name, parser in parsers.items():
        section = by_title[f"shardpipe {name}"]
        for flag in _flags(parser):
            assert f"- `{flag}" in section or f", {flag}" in section, (name, flag)
        for action in parser._actions:
            if action.choices and not action.option_strings:
                continue
            for choice in action.choices or ():
                assert str(choice) in section, (name, action.dest, choice)


def test_the_cli_reference_shows_the_exit_statuses() -> None:
    assert statuses_markdown() in _cli_reference().cli_reference_markdown()


def test_help_text_is_shown_literally() -> None:
    """Markdown characters in help text (``*``, ``|``, ``<``) are escaped, not rendered."""
    escape = _cli_reference().escape
    assert escape("w-|w|a|r+ *x* <y>") == r"w-\|w\|a\|r+ \*x\* \<y\>"


def _layers() -> list[list[str]]:
    """The layers of ``[tool.importlinter]``, top to bottom, each a list of packages."""
    config = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    return [[p.strip() for p in layer.split("|")] for layer in layers]


def test_the_architecture_page_follows_the_layer_contract() -> None:
    page = (DOCS / "architecture.md").read_text()
    rows = re.findall(r"^\| (`[^|]+`(?: \\\| `[^|]+`)*) \|", page, re.M)
    documented = [re.findall(r"`(\w+)`", row) for row in rows]
    assert documented == _layers()


def test_the_readme_lists_the_layers_in_order() -> None:
    rows = re.findall(r"^\| (`\w+`(?: · `\w+`)*) \|", README.read_text(), re.M)
    documented = [re.findall(r"`(\w+)`", row) for row in rows]
    assert documented == [[p for p in layer if p != "_version"] for layer in _layers()]


def test_every_guide_and_page_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15
    assert [link for link in local if not (REPOSITORY / link).exists()] == []
    guides = {p.relative_to(REPOSITORY).as_posix() for p in (DOCS / "guides").glob("*.md")}
    assert {link for link in local if link.startswith("docs/guides/")} >= guides


def test_the_readme_example_is_the_docs_example() -> None:
    readme = _python_block(README.read_text(), "to_sharded_zarr")
    index = _python_block((DOCS / "index.md").read_text(), "to_sharded_zarr")
    assert readme == index
    assert len(readme.strip().splitlines()) <= 10


@pytest.mark.timeout(300)
def test_the_readme_example_runs_when_pasted(tmp_path: Path, page_server: ForkServer) -> None:
    """As ``python -c EXAMPLE`` runs it, in a process forked with the libraries imported
    (not shardpipe), as the guides' pages run."""
    example = _python_block(README.read_text(), "to_sharded_zarr")
    child = page_server.start(None, [], code=example, cwd=tmp_path)
    status = child.wait_or_kill(280)
    assert status == 0, child.stderr()
    assert "(512, 512, 512) (256, 256, 256) (64, 64, 64)" in child.stdout()
    assert (tmp_path / "volume.zarr" / "zarr.json").is_file()


def test_every_package_has_its_internal_reference() -> None:
    """Each package and top-level module of the layers has its generated pages."""
    page = (DOCS / "api" / "internals.rst").read_text()
    listed = re.findall(r"^   shardpipe\.(\w+)$", page, re.M)
    layered = [p for layer in _layers() for p in layer if p != "_version"]
    assert listed == [*layered, "testing"]
