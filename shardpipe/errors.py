"""shardpipe's exceptions, all under :class:`ShardpipeError`."""

from __future__ import annotations


class ShardpipeError(Exception):
    """Base class of every error shardpipe raises on purpose."""


class InvalidArgumentError(ShardpipeError, ValueError):
    """An argument is wrong; the message names it and says how to fix it."""

    def __init__(self, parameter: str, problem: str, fix: str) -> None:
        self.parameter = parameter
        super().__init__(f"{parameter}: {problem}. {fix}")


class ArrayExistsError(ShardpipeError, FileExistsError):
    """Something already exists where the array would go and overwrite is off."""


class StoreNotWritableError(ShardpipeError, PermissionError):
    """The target store cannot be written to."""


class VerificationError(ShardpipeError):
    """``verify`` found damaged shards."""
