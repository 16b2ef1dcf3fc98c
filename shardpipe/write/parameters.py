"""Parameters that several front doors take, documented once: ``shares_parameters``.

``to_sharded_zarr``, ``prepare_write``, the rechunk functions and the xarray
accessor take many of the same options (``shards``, ``chunks``, ``max_mem``,
``storage_options`` ...). Each option's numpydoc entry and default are
written once, in a :class:`SharedParameters` (the array options are in
:mod:`shardpipe.write.options`); a front door takes the options it accepts
as ``**options: Unpack[SomeOptions]`` (a ``TypedDict``, which type checkers
read) and is decorated with :func:`shares_parameters`, which

* gives it the signature its callers see (``help()``, ``inspect.signature``,
  Sphinx): every option a keyword-only parameter with its type and default;
* completes its docstring: the Parameters section lists every parameter in
  signature order, the door's own entries as written and the shared entry
  (with its default) for the rest;
* refuses a keyword the door does not take with the ``TypeError`` Python
  raises for an unknown keyword argument.

A door may also spell a shared parameter out (``path=None`` taken
positionally, ``progress: bool = False`` before its ``**options``, or every
parameter of a door whose options are its own): its entry is then the
shared one, and its default must be the shared default (checked at
import); a parameter that means something else at that door documents its
own entry, which wins. A class is decorated the same way: its docstring's
Parameters section documents its ``__init__``.

The technique is that of pandas' and xarray's shared docstrings, made
strict: a parameter documented nowhere, documented but not taken, or taking
a shared entry with another default, fails at import.
``tests/write/test_parameters.py`` holds every public door to it.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY

_NAME = re.compile(r"^([A-Za-z_]\w*)(?:\s*:\s*(.*))?$")
_UNDERLINE = re.compile(r"^-{3,}$")


@dataclass(frozen=True)
class Entry:
    """One parameter's numpydoc entry.

    Attributes
    ----------
    name : str
        The parameter.
    kind : str
        What follows ``name :`` on the first line (its type), or ``""``.
    text : tuple of str
        The description's lines, indented by 4 spaces.
    """

    name: str
    kind: str
    text: tuple[str, ...]

    def lines(self, default: object = inspect.Parameter.empty) -> list[str]:
        """The entry's lines; a default other than None is added to the type, numpydoc style."""
        kind = self.kind
        if default is not inspect.Parameter.empty and default is not None:
            shown = f'"{default}"' if isinstance(default, str) else repr(default)
            kind = f"{kind}, default {shown}" if kind else f"default {shown}"
        return [f"{self.name} : {kind}" if kind else self.name, *self.text]


def parse_entries(lines: list[str], where: str) -> dict[str, Entry]:
    """The entries of a Parameters section (its lines, unindented), by name.

    Raises
    ------
    ValueError
        For an entry naming several parameters (``a, b : int``), a name given
        twice, or text before the first entry.
    """
    entries: dict[str, Entry] = {}
    current: list[str] = []

    def close() -> None:
        if not current:
            return
        match = _NAME.match(current[0])
        if match is None:
            raise ValueError(f"{where}: {current[0]!r} is not one parameter's entry (name : type)")
        name, kind = match.group(1), (match.group(2) or "").strip()
        if name in entries:
            raise ValueError(f"{where}: parameter {name!r} is documented twice")
        while current and not current[-1].strip():
            current.pop()
        entries[name] = Entry(name, kind, tuple(current[1:]))

    for line in lines:
        if line and not line[0].isspace():
            close()
            current = [line]
        elif current:
            current.append(line)
        elif line.strip():
            raise ValueError(f"{where}: {line!r} comes before the first parameter")
    close()
    return entries


class SharedParameters(Mapping[str, Entry]):
    """Numpydoc entries and defaults of parameters that several functions take.

    Parameters
    ----------
    numpydoc : str
        The entries, as in a Parameters section (``name : type`` lines, each
        followed by its description indented by 4 spaces).
    defaults : mapping
        The default of each keyword option among them (positional parameters
        have none).
    """

    def __init__(self, numpydoc: str, defaults: Mapping[str, object]) -> None:
        self._entries = parse_entries(inspect.cleandoc(numpydoc).splitlines(), "shared")
        unknown = set(defaults) - set(self._entries)
        if unknown:
            raise ValueError(f"defaults of undocumented parameters: {sorted(unknown)}")
        self.defaults: Mapping[str, object] = dict(defaults)

    @classmethod
    def _of(cls, entries: dict[str, Entry], defaults: dict[str, object]) -> SharedParameters:
        made = cls.__new__(cls)
        made._entries, made.defaults = entries, defaults
        return made

    def __or__(self, other: SharedParameters) -> SharedParameters:
        """Both sets; where both hold a name, ``other``'s entry wins, and its default if it has one.

        The order is ``self``'s, then the names only ``other`` holds.
        """
        return self._of({**self._entries, **other._entries}, {**self.defaults, **other.defaults})

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def default(self, name: str) -> object:
        """The default of option ``name`` (``inspect.Parameter.empty`` if it has none)."""
        return self.defaults.get(name, inspect.Parameter.empty)


def shares_parameters(shared: SharedParameters) -> Callable[[F], F]:
    """Give a front door the signature and docstring of the options it takes from ``shared``.

    The door declares its options as ``**options: Unpack[SomeOptions]``; every
    key of ``SomeOptions`` needs an entry and a default in ``shared``. See the
    module's docstring for what the decorated door does.

    Raises
    ------
    TypeError
        At import, for a parameter that is documented nowhere, an entry of the
        docstring that names no parameter, an option without a default, or a
        parameter taking a shared entry with a default other than the shared one.
    """

    def decorate(func: F) -> F:
        name = func.__qualname__
        if isinstance(func, type):  # a class: its docstring documents its __init__
            init = func.__init__  # type: ignore[misc]  # the class's own, not an instance's
            func.__doc__ = _document(func, _signature(init, shared), shared)
            return func
        signature = _signature(func, shared)
        func.__doc__ = _document(func, signature, shared)
        taken = frozenset(
            p.name for p in signature.parameters.values() if p.kind is not p.POSITIONAL_ONLY
        )

        @functools.wraps(func)
        def door(*args: Any, **kwargs: Any) -> Any:
            for keyword in kwargs:
                if keyword not in taken:
                    raise TypeError(f"{name}() got an unexpected keyword argument {keyword!r}")
            return func(*args, **kwargs)

        door.__signature__ = signature  # type: ignore[attr-defined]
        return cast(F, door)

    return decorate


def options_of(func: Callable[..., Any]) -> dict[str, Any]:
    """The options ``func`` takes as ``**options: Unpack[SomeOptions]``, with their types."""
    own = inspect.signature(func, follow_wrapped=False, eval_str=True)
    for parameter in own.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            unpacked = typing.get_args(parameter.annotation)
            if typing.get_origin(parameter.annotation) is not typing.Unpack or not unpacked:
                raise TypeError(f"{func.__qualname__}: **{parameter.name} is not Unpack[...]")
            return typing.get_type_hints(unpacked[0])
    return {}


def _signature(func: Callable[..., Any], shared: SharedParameters) -> inspect.Signature:
    """``func``'s parameters with its ``**options`` spread out as keyword-only parameters."""
    options = options_of(func)
    missing = [o for o in options if shared.default(o) is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"{func.__qualname__}: options {missing} have no shared default")
    order = {name: index for index, name in enumerate(shared)}
    spread = [
        inspect.Parameter(name, KEYWORD_ONLY, default=shared.default(name), annotation=kind)
        for name, kind in sorted(options.items(), key=lambda item: order[item[0]])
    ]
    own = inspect.signature(func, eval_str=True)
    kept = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    before = [p for p in kept if p.kind is not KEYWORD_ONLY]
    after = [p for p in kept if p.kind is KEYWORD_ONLY]
    return own.replace(parameters=[*before, *spread, *after])


def _document(
    func: Callable[..., Any], signature: inspect.Signature, shared: SharedParameters
) -> str:
    """``func``'s docstring with a Parameters section holding every parameter of ``signature``."""
    where = func.__qualname__
    lines = inspect.cleandoc(func.__doc__ or "").splitlines()
    section = _section(lines, "Parameters")
    if section is None:
        raise TypeError(f"{where}: the docstring has no Parameters section")
    start, stop = section
    own = parse_entries(lines[start:stop], where)
    names = [n for n in signature.parameters if n not in ("self", "cls")]
    stray = sorted(set(own) - set(names))
    if stray:
        raise TypeError(f"{where}: the docstring documents {stray}, which it does not take")
    body: list[str] = []
    for name in names:
        if name in own:
            body += own[name].lines()
        elif name in shared:
            default = signature.parameters[name].default
            expected = shared.default(name)
            if expected is not inspect.Parameter.empty and repr(default) != repr(expected):
                raise TypeError(
                    f"{where}: {name}={default!r}, but its shared default is {expected!r} "
                    "(a parameter that means something else documents its own entry)"
                )
            body += shared[name].lines(default)
        else:
            raise TypeError(f"{where}: parameter {name!r} is documented nowhere")
    tail = lines[stop:]
    return "\n".join([*lines[:start], *body, *([""] if tail else []), *tail])


def _section(lines: list[str], title: str) -> tuple[int, int] | None:
    """Where the body of the section ``title`` starts and stops in ``lines``; None if absent."""
    headers = [
        index
        for index in range(len(lines) - 1)
        if lines[index] and not lines[index][0].isspace() and _UNDERLINE.match(lines[index + 1])
    ]
    for number, index in enumerate(headers):
        if lines[index] == title:
            stop = headers[number + 1] if number + 1 < len(headers) else len(lines)
            return index + 2, stop
    return None
