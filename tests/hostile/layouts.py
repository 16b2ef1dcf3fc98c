"""Hostile layouts of stores and the commands run on them (for :mod:`tests.hostile.audit_child`).

Each :class:`Layout` builds, in a fresh folder, a store holding something
hostile (links that lead out of it, forged markers and records, keys with
``..``) and a decoy tree beside it: the files and folders those hostile
parts point to or name. Each :class:`Command` runs one shardpipe command
(the Python API, or the command line in the same process) on it. The child
process records what each command touched; the test
(:mod:`tests.hostile.test_hostile_layouts`) asserts that nothing outside the
store was, that the decoy did not change and that every failure was a
``ShardpipeError`` (or, on the command line, one line on stderr).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import shardpipe
from shardpipe.cli.parser import main as cli_main
from shardpipe.errors import ShardpipeError
from shardpipe.journal.undo import UndoRecord
from shardpipe.storage.keys import JOB_DIR
from tests.support import DRAFT_FIXTURES

FIXTURES = DRAFT_FIXTURES
RAW = re.compile(
    r"\b(FileNotFoundError|NotADirectoryError|IsADirectoryError|PermissionError|OSError|"
    r"KeyError|TypeError|IndexError|ZeroDivisionError|AttributeError|ValueError|"
    r"RecursionError|MemoryError|OverflowError)\b"
)
"""A built-in exception named on the command line's stderr: a failure that is no ShardpipeError."""
SHAPE, SHARDS, CHUNKS = (16, 16), (8, 8), (4, 4)
DATA = np.arange(256, dtype="u2").reshape(SHAPE)


@dataclass
class Built:
    """A layout built in a folder: its store roots, its decoy, named paths for the commands."""

    roots: list[str]
    decoy: str
    paths: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """One command: a Python call, or command-line arguments (``{name}`` filled from paths).

    ``expect`` is ``"refused"`` when the command must fail (with a
    ``ShardpipeError``), ``"any"`` when it may also succeed.
    """

    name: str
    call: Callable[[Built], Any] | None = None
    argv: tuple[str, ...] = ()
    expect: str = "any"


@dataclass(frozen=True)
class Layout:
    """How to build a hostile layout, and the commands to run on it."""

    build: Callable[[str, dict[str, Any]], Built]
    commands: list[Command]


def snapshot(folder: str) -> dict[str, str]:
    """Every entry under ``folder`` (itself too): its kind, and a hash of its bytes or target."""
    found = {}
    for top, dirs, files in os.walk(folder):
        for name in [*dirs, *files, ""]:
            path = os.path.join(top, name) if name else top
            st = os.lstat(path)
            if os.path.islink(path):
                what = f"link {os.readlink(path)}"
            elif os.path.isdir(path):
                what = f"folder {sorted(os.listdir(path))}"
            else:
                what = f"file {hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
            found[os.path.relpath(path, folder)] = f"{what} {st.st_mode} {st.st_mtime_ns}"
    return found


def run(command: Command, built: Built) -> dict[str, str]:
    """Run ``command``: ``{"outcome": "ok" | "refused" | "crash", "detail": ...}``."""
    if command.call is not None:
        try:
            command.call(built)
        except ShardpipeError as err:
            return {"outcome": "refused", "detail": f"{type(err).__name__}: {err}"}
        except BaseException:
            return {"outcome": "crash", "detail": traceback.format_exc()}
        return {"outcome": "ok", "detail": ""}
    argv = [arg.format(**built.paths) for arg in command.argv]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli_main(argv)
    except BaseException:
        return {"outcome": "crash", "detail": traceback.format_exc()}
    lines = err.getvalue().strip().splitlines()
    detail = lines[-1] if lines else ""
    if "Traceback" in err.getvalue() or RAW.search(detail):
        return {"outcome": "crash", "detail": err.getvalue()}
    return {"outcome": "ok" if status == 0 else "refused", "detail": f"exit {status}: {detail}"}


def _decoy(place: str) -> str:
    decoy = os.path.join(place, "decoy")
    os.makedirs(os.path.join(decoy, "sibling", "c", "0"))
    Path(decoy, "victim.txt").write_text("not shardpipe's")
    Path(decoy, "secret").write_bytes(b"secret bytes " * 64)
    Path(decoy, "sibling", "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    Path(decoy, "sibling", "c", "0", "0").write_bytes(b"a sibling's shard")
    return decoy


def _array(place: str) -> tuple[str, str]:
    """A store holding a small sharded array ``arr``, and the decoy beside it."""
    store = os.path.join(place, "store")
    shardpipe.to_sharded_zarr(DATA, os.path.join(store, "arr"), shards=SHARDS, chunks=CHUNKS)
    return store, _decoy(place)


def _paths(store: str, **more: str) -> dict[str, str]:
    return {"store": store, "arr": os.path.join(store, "arr"), **more}


# -- a sharded array whose shard and shard folder are links out of the store -------------------
def build_linked_array(place: str, settings: dict[str, Any]) -> Built:
    store, decoy = _array(place)
    arr = Path(store, "arr")
    shutil.move(arr / "c/0/0", Path(decoy, "shard00"))
    (arr / "c/0/0").symlink_to(Path(decoy, "shard00"))
    shutil.move(arr / "c/1", Path(decoy, "c1"))
    (arr / "c/1").symlink_to(Path(decoy, "c1"), target_is_directory=True)
    return Built([store], decoy, _paths(store))


def build_linked_group_member(place: str, settings: dict[str, Any]) -> Built:
    """A group (with a dataset's consolidated metadata) whose member folder links outside."""
    import xarray as xr

    store = os.path.join(place, "store")
    decoy = _decoy(place)
    data = xr.Dataset({"t": (("time", "x"), DATA.astype("f4"))}, coords={"time": np.arange(16)})
    data.chunk({"time": 8}).shard.to_zarr(
        os.path.join(store, "ds"), shards={"time": 8}, chunks={"time": 4}
    )
    shutil.move(Path(store, "ds", "t"), Path(decoy, "t"))
    Path(store, "ds", "t").symlink_to(Path(decoy, "t"), target_is_directory=True)
    return Built([store], decoy, {"store": store, "ds": os.path.join(store, "ds")})


def build_linked_records(place: str, settings: dict[str, Any]) -> Built:
    """The array's ``.shardpipe/`` folder is a link to a folder outside, full of leftovers."""
    store, decoy = _array(place)
    records = Path(decoy, "records")
    shutil.move(Path(store, "arr", JOB_DIR), records)  # the job record of the write
    for name in ["staging/run1/arr.c.0.0/part-00000", "staging/x.shardpipe-tmp", "undo/j/ab"]:
        (records / name).parent.mkdir(parents=True, exist_ok=True)
        (records / name).write_bytes(b"not shardpipe's")
    (records / "done" / "u1").mkdir(parents=True)
    (records / "done" / "u1" / "cd").write_bytes(b"")
    Path(store, "arr", JOB_DIR).symlink_to(records, target_is_directory=True)
    return Built([store], decoy, _paths(store))


def build_forged_records(place: str, settings: dict[str, Any]) -> Built:
    """Undo, job and resume records forged to name keys outside the array."""
    store, decoy = _array(place)
    jobs = Path(store, "arr", JOB_DIR)
    (jobs / "undo" / "j1").mkdir(parents=True)
    for i, key in enumerate(["../../decoy/secret", "arr/../../decoy/secret", "/etc/hostname"]):
        record = UndoRecord(key, 4, ((0, b"XXXX"),)).encode()
        (jobs / "undo" / "j1" / f"{i:040x}").write_bytes(record)
    marker = {"job": "j1", "action": "update", "host": os.uname().nodename, "pid": 2**31 - 2}
    (jobs / "job.json").write_text(json.dumps({**marker, "started": 1.0}))
    (jobs / "staging").mkdir()
    (jobs / "staging" / "leftover").write_bytes(b"x")
    (jobs / "write.json").write_text(json.dumps({"state": "writing", "target": "../../decoy"}))
    return Built([store], decoy, _paths(store))


# -- drafts of the storage-transformer era -------------------------------------------------------
def _draft(place: str) -> tuple[str, str]:
    store = os.path.join(place, "store")
    os.makedirs(store)
    draft = os.path.join(store, "draft")
    shutil.copytree(FIXTURES / "hierarchy", draft)
    return draft, _decoy(place)


def _draft_paths(place: str, draft: str) -> dict[str, str]:
    return {"draft": draft, "target": os.path.join(place, "store", "v3")}


def build_forged_migrate_marker(place: str, settings: dict[str, Any]) -> Built:
    draft, decoy = _draft(place)
    marker = {
        "source": os.path.abspath(draft),
        "in_place": True,
        "documents": ["../../decoy/victim.txt", "a/zarr.json"],
        "arrays": ["../../decoy/sibling", "volume"],
    }
    os.makedirs(os.path.join(draft, ".shardpipe"))
    Path(draft, ".shardpipe", "migrate.json").write_text(json.dumps(marker))
    return Built([os.path.dirname(draft)], decoy, _draft_paths(place, draft))


def build_draft_dot_dot_node(place: str, settings: dict[str, Any]) -> Built:
    """A node ``..`` (``meta/root/...array.json``) whose shards lie under ``data/``."""
    draft, decoy = _draft(place)
    shutil.copy(Path(draft, "meta/root/flags.array.json"), Path(draft, "meta/root/...array.json"))
    shutil.copytree(Path(draft, "data/root/flags/c0"), Path(draft, "data/c0"))
    return Built([os.path.dirname(draft)], decoy, _draft_paths(place, draft))


def build_draft_linked_shard(place: str, settings: dict[str, Any]) -> Built:
    draft, decoy = _draft(place)
    shard = Path(draft, "data/root/volume/c0/0/0")
    shutil.move(shard, Path(decoy, "volume-shard"))
    shard.symlink_to(Path(decoy, "volume-shard"))
    shutil.move(Path(draft, "data/root/a/b"), Path(decoy, "b"))
    Path(draft, "data/root/a/b").symlink_to(Path(decoy, "b"), target_is_directory=True)
    return Built([os.path.dirname(draft)], decoy, _draft_paths(place, draft))


def build_s3_draft_dot_dot(place: str, settings: dict[str, Any]) -> Built:
    """A draft on S3 with nodes named ``../../escaped`` and ``../../../decoy/sibling``.

    S3 keys may hold ``..``: listed, they would name nodes outside the
    draft, and a migration to a local target would write beside it.
    """
    import boto3

    options = settings["storage_options"]
    kw = options["client_kwargs"]
    client = boto3.client("s3", endpoint_url=kw["endpoint_url"], region_name=kw["region_name"])
    prefix = f"{os.path.basename(place)}-{os.getpid()}/draft"
    source = FIXTURES / "hierarchy"
    for path in source.rglob("*"):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(source).as_posix()}"
            client.put_object(Bucket=settings["bucket"], Key=key, Body=path.read_bytes())
    flags = (source / "meta/root/flags.array.json").read_bytes()
    for node in ["../../escaped", "../../../decoy/sibling"]:
        client.put_object(
            Bucket=settings["bucket"], Key=f"{prefix}/meta/root/{node}.array.json", Body=flags
        )
    decoy = _decoy(place)
    os.makedirs(os.path.join(place, "store"))
    url = f"s3://{settings['bucket']}/{prefix}"
    return Built(
        [os.path.join(place, "store")],
        decoy,
        {"draft": url, "target": os.path.join(place, "store", "v3")},
        options,
    )


# -- Neuroglancer precomputed volumes ----------------------------------------------------------
def _volume(place: str) -> tuple[str, str, str]:
    store = os.path.join(place, "store")
    volume = os.path.join(store, "vol")
    data = np.arange(16**3, dtype="u1").reshape(16, 16, 16)
    shardpipe.to_neuroglancer_precomputed(data, volume, resolution=(8, 8, 8), chunk_size=(8, 8, 8))
    info = json.loads(Path(volume, "info").read_text())
    return store, volume, info["scales"][0]["key"]


def _set_key(volume: str, key: str) -> None:
    info = json.loads(Path(volume, "info").read_text())
    info["scales"][0]["key"] = key
    Path(volume, "info").write_text(json.dumps(info))


def build_precomputed_keys(place: str, settings: dict[str, Any]) -> Built:
    """Volumes whose scale key leads out: ``../../decoy/scale``, to ``/usr/share``, absolute."""
    store, volume, key = _volume(place)
    decoy = _decoy(place)
    shutil.copytree(Path(volume, key), Path(decoy, "scale"))
    for name, hostile in [
        ("up", "../../decoy/scale"),
        ("far", "../../../../../../../../usr/share/zoneinfo"),
        ("abs", "/usr/share/zoneinfo"),
    ]:
        shutil.copytree(volume, Path(store, name))
        _set_key(str(Path(store, name)), hostile)
    return Built([store], decoy, {"store": store, "vol": volume})


def build_precomputed_linked_scale(place: str, settings: dict[str, Any]) -> Built:
    """A volume whose scale folder is a link to a folder outside."""
    store, volume, key = _volume(place)
    decoy = _decoy(place)
    shutil.move(Path(volume, key), Path(decoy, "scale"))
    Path(volume, key).symlink_to(Path(decoy, "scale"), target_is_directory=True)
    return Built([store], decoy, {"store": store, "vol": volume})


# -- the commands ---------------------------------------------------------------------------
def _arr(b: Built) -> str:
    return b.paths["arr"]


def _region(strategy: str, box: tuple[slice, ...]) -> Callable[[Built], Any]:
    def call(b: Built) -> Any:
        shape = tuple(s.stop - s.start for s in box)
        return shardpipe.to_sharded_zarr(
            np.full(shape, 7, "u2"), _arr(b), region=box, write_strategy=strategy
        )

    return call


ARRAY_COMMANDS = [
    Command("verify", lambda b: shardpipe.verify(_arr(b))),
    Command("info", lambda b: shardpipe.info(_arr(b))),
    Command("repair", lambda b: shardpipe.repair(_arr(b))),
    Command("compact", lambda b: shardpipe.compact(_arr(b), threshold=0.0)),
    Command("cleanup", lambda b: shardpipe.cleanup(_arr(b))),
    Command("cli verify", argv=("verify", "{arr}")),
    Command("cli info", argv=("info", "{arr}")),
    Command("cli repair", argv=("repair", "{arr}")),
    Command("cli compact", argv=("compact", "{arr}")),
    Command("cli cleanup", argv=("cleanup", "{arr}")),
    Command("region everything", _region("auto", (slice(0, 16), slice(0, 16)))),
    Command("region in place", _region("in_place", (slice(1, 3), slice(1, 3)))),
    Command("region append", _region("append", (slice(9, 11), slice(9, 11)))),
    Command("region rewrite", _region("rewrite", (slice(9, 11), slice(1, 3)))),
    Command(
        "append_dim",
        lambda b: shardpipe.to_sharded_zarr(np.ones((8, 16), "u2"), _arr(b), append_dim=0),
    ),
    Command(
        "resume",
        lambda b: shardpipe.to_sharded_zarr(
            DATA, _arr(b), shards=SHARDS, chunks=CHUNKS, resume="force"
        ),
    ),
    Command(
        "overwrite",
        lambda b: shardpipe.to_sharded_zarr(
            DATA, _arr(b), shards=SHARDS, chunks=CHUNKS, overwrite=True
        ),
    ),
]


def _migrating(to_target: bool, **kwargs: Any) -> Callable[[Built], Any]:
    def call(b: Built) -> Any:
        target = b.paths["target"] if to_target else None
        options: dict[str, Any] = {"storage_options": b.options} if b.options else {}
        if b.options and to_target:
            options["target_storage_options"] = {}  # a local target
        return shardpipe.migrate(b.paths["draft"], target, **options, **kwargs)

    return call


def _draft_commands(in_place: str, to_target: str, read: str) -> list[Command]:
    """Commands on a draft: what ``migrate`` in place, to a target, and reading must do."""
    return [
        Command("migrate in place", _migrating(False), expect=in_place),
        Command("migrate in place, dry run", _migrating(False, dry_run=True), expect=in_place),
        Command("migrate to a target", _migrating(True), expect=to_target),
        Command("migrate to a target, dry run", _migrating(True, dry_run=True), expect=to_target),
        Command("cli migrate", argv=("migrate", "{draft}", "--no-progress"), expect=in_place),
        Command("cli migrate --dry-run", argv=("migrate", "{draft}", "--dry-run"), expect=in_place),
        Command(
            "cli migrate to a target",
            argv=("migrate", "{draft}", "{target}", "--no-progress"),
            expect=to_target,
        ),
        Command("verify", lambda b: shardpipe.verify(b.paths["draft"]), expect=read),
        Command("info", lambda b: shardpipe.info(b.paths["draft"]), expect=read),
        Command("cli verify", argv=("verify", "{draft}"), expect=read),
    ]


def _s3_draft_commands() -> list[Command]:
    def on_s3(function: Callable[..., Any]) -> Callable[[Built], Any]:
        return lambda b: function(b.paths["draft"], storage_options=b.options)

    return [
        *_draft_commands("refused", "refused", "refused")[:4],
        Command("verify", on_s3(shardpipe.verify), expect="refused"),
        Command("info", on_s3(shardpipe.info), expect="refused"),
    ]


def _vol(name: str) -> Callable[[Built], str]:
    return lambda b: os.path.join(b.paths["store"], name)


def _volume_commands(names: list[str], expect: str) -> list[Command]:
    commands = []
    for name in names:
        commands += [
            Command(f"verify {name}", lambda b, n=name: shardpipe.verify(_vol(n)(b)), expect),
            Command(f"info {name}", lambda b, n=name: shardpipe.info(_vol(n)(b)), expect),
            Command(f"cli verify {name}", argv=("verify", f"{{store}}/{name}"), expect=expect),
        ]
    commands.append(
        Command(
            "precomputed write into the existing volume",
            lambda b: shardpipe.to_neuroglancer_precomputed(
                np.zeros((16, 16, 16), "u1"),
                b.paths["vol"],
                resolution=(8, 8, 8),
                chunk_size=(8, 8, 8),
                overwrite=True,
            ),
        )
    )
    return commands


def _dataset_commands() -> list[Command]:
    import xarray as xr

    def region(b: Built) -> Any:
        new = xr.Dataset({"t": (("time", "x"), np.ones((8, 16), "f4"))})
        return new.shard.to_zarr(b.paths["ds"], region={"time": slice(0, 8)}, mode="r+")

    return [
        Command("verify", lambda b: shardpipe.verify(b.paths["ds"])),
        Command("info", lambda b: shardpipe.info(b.paths["ds"])),
        Command("cli verify", argv=("verify", "{ds}")),
        Command("cli repair-dataset", argv=("repair-dataset", "{ds}")),
        Command("open_dataset", lambda b: shardpipe.open_dataset(b.paths["ds"]).load()),
        Command("dataset region", region),
        Command(
            "rechunk_group",
            lambda b: shardpipe.rechunk_group(b.paths["ds"], os.path.join(b.paths["store"], "n")),
        ),
    ]


LAYOUTS: dict[str, Layout] = {
    "linked_group_member": Layout(build_linked_group_member, _dataset_commands()),
    "linked_array": Layout(build_linked_array, ARRAY_COMMANDS),
    "linked_records": Layout(build_linked_records, ARRAY_COMMANDS),
    "forged_records": Layout(build_forged_records, ARRAY_COMMANDS),
    "forged_migrate_marker": Layout(
        build_forged_migrate_marker, _draft_commands("refused", "any", "any")
    ),
    "draft_dot_dot_node": Layout(
        build_draft_dot_dot_node, _draft_commands("refused", "refused", "refused")
    ),
    "draft_linked_shard": Layout(
        build_draft_linked_shard, _draft_commands("refused", "refused", "any")
    ),
    "s3_draft_dot_dot": Layout(build_s3_draft_dot_dot, _s3_draft_commands()),
    "precomputed_keys": Layout(
        build_precomputed_keys, _volume_commands(["up", "far", "abs"], "any")
    ),
    "precomputed_linked_scale": Layout(
        build_precomputed_linked_scale, _volume_commands(["vol"], "any")
    ),
}
"""Every layout, by name."""


# -- the control: commands that do touch the decoy, which the audit must report -----------------
def build_control(place: str, settings: dict[str, Any]) -> Built:
    """A small array, the decoy beside it, and a link in the store to the decoy's secret."""
    store, decoy = _array(place)
    Path(store, "out").symlink_to(Path(decoy, "secret"))
    return Built([store], decoy, {**_paths(store), "decoy": decoy})


def _temporary_file(b: Built) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile() as file:
        file.write(b"within the child's own folder")


CONTROL_COMMANDS = [
    Command("read the secret", lambda b: Path(b.paths["decoy"], "secret").read_bytes()),
    Command("read through the link", lambda b: Path(b.paths["store"], "out").read_bytes()),
    Command("list the decoy", lambda b: os.listdir(b.paths["decoy"])),
    Command("write the victim", lambda b: Path(b.paths["decoy"], "victim.txt").write_text("x")),
    Command("a temporary file", _temporary_file),
]
CONTROLS: dict[str, Layout] = {"control": Layout(build_control, CONTROL_COMMANDS)}
"""Layouts whose commands do what no shardpipe command may: the audit's own test."""
