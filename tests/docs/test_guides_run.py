"""Every example of the getting-started page and the guides runs as written.

A new user pastes a page's blocks, in order, into one Python session (the
```python blocks) and one shell (the lines of ```bash and ```console blocks that
run ``shardpipe``), in an empty folder. Each test does exactly that in a child
process whose working directory is a new temporary folder, forked from a process that
has imported the libraries shardpipe imports (numpy, pandas, Dask, zarr, xarray: the
``page_server`` of ``conftest.py``; a new interpreter would spend seconds on them for
every page) and nothing of shardpipe, so a page's ``import shardpipe`` still does all
shardpipe's own import does. The Python
blocks run one after another in one namespace, empty at first (a name a block uses
must be imported by the page), and the command lines run, between
them in page order, in the same folder: a plain command line (no pipe, redirection
or glob) as the shell would run it, its variables expanded and its words split, by
calling the ``shardpipe`` entry point's function in that process (a new
interpreter would spend seconds importing shardpipe again; ``tests/cli`` runs the
installed entry point itself), any other through ``bash`` with the installed
``shardpipe`` first on the ``PATH``. A Python block whose first line names a
file (``# conftest.py``, ``# test_my_pipeline.py``) is that file: it is written to
the folder, and a ``test_*.py`` file is then run by pytest there. A failure names
the page, the block, its line and the error.

A block that cannot run as pasted (a signature, a sketch that needs a cluster)
is preceded by ``<!-- not run: why -->``; a page may have at most
:data:`MAX_NOT_RUN` of them, each saying why.

Pages that name object-store URLs run against the session's emulators, reached as
each client reaches a server from its environment: ``s3://`` the moto server of
``shardpipe.testing.s3`` through ``AWS_ENDPOINT_URL`` and fake credentials,
``gs://`` fake-gcs-server through ``STORAGE_EMULATOR_HOST``, ``az://`` Azurite
through ``AZURE_STORAGE_CONNECTION_STRING``. The buckets and containers a page names
are created first and removed afterwards.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer

DOCS = REPOSITORY / "docs"
PAGES = [DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))]
PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "console", "sh", "shell"}
MAX_NOT_RUN = 2
TIMEOUT = 300

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<why>[^>]*)-->\s*\Z")
FILE_NAME = re.compile(r"\A#\s*(?P<name>[\w-]+\.py)[ \t]*\n")
NAME = r"([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\b"
BUCKETS = {
    "s3": re.compile(r"\bs3://" + NAME),
    "gcs": re.compile(r"\bgcs?://" + NAME),
    "azure": re.compile(r"\b(?:az|abfss?)://" + NAME),
}


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    number: int
    line: int
    lang: str
    code: str
    not_run: str | None

    def steps(self) -> list[dict[str, object]]:
        """What the block runs: its code, the file it is, or its ``shardpipe`` command lines."""
        where = {"block": self.number, "line": self.line}
        if self.not_run is not None:
            return []
        if self.lang in PYTHON:
            named = FILE_NAME.match(self.code)
            if named:
                return [{**where, "file": named["name"], "text": self.code}]
            return [{**where, "python": self.code}]
        if self.lang not in SHELL:
            return []
        joined = re.sub(r"\\\n\s*", " ", self.code)
        commands = []
        for line in joined.splitlines():
            line = line.strip()
            line = line.removeprefix("$ ")
            if line.startswith("shardpipe "):
                commands.append({**where, "shell": line})
        return commands


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, numbered from 1, with their ``not run`` reasons."""
    text = page.read_text()
    found = []
    for number, match in enumerate(FENCE.finditer(text), 1):
        indent = len(match["indent"])
        code = "\n".join(line[indent:] for line in match["body"].splitlines()) + "\n"
        before = NOT_RUN.search(text[: match.start()])
        found.append(
            Block(
                number=number,
                line=text.count("\n", 0, match.start()) + 1,
                lang=match["lang"],
                code=code,
                not_run=before["why"].strip() if before else None,
            )
        )
    return found


DRIVER = r"""
import contextlib, io, json, os, pathlib, re, shlex, subprocess, sys, time, traceback

steps = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
# what only a shell can run: pipes, redirections, lists, substitutions, globs
SHELL_SYNTAX = re.compile(r"[|&;<>()`*?]")


# pytest runs a page's test file in a fork of this process as it starts (no block run yet:
# the libraries imported, one thread, the page's environment), told the file on a pipe, as
# `pytest FILE` in the page's shell would run it, without a new interpreter's imports.
# Plugins load only as the page's files name them (`pytest_plugins`): the installed ones
# (hypothesis, xdist, napari's...) would cost seconds and serve no page.
def start_pytest():
    # its pid and the pipe's end to write to
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(read_end)
        return pid, write_end
    os.close(write_end)
    asked = os.read(read_end, 4096)  # empty when the driver ends without asking
    status = 0
    if asked:
        name, out, err = json.loads(asked)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        os.dup2(os.open(out, flags), 1)
        os.dup2(os.open(err, flags), 2)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        import pytest

        status = int(pytest.main(["-q", "-p", "no:cacheprovider", name]))
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def run_pytest(runner, name):
    # what pytest, run on `name` by `runner` (from start_pytest), ended with
    pid, pipe = runner
    out, err = OUTPUTS / f"{name}.out", OUTPUTS / f"{name}.err"
    os.write(pipe, json.dumps([name, str(out), str(err)]).encode())
    os.close(pipe)
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(
        name, os.waitstatus_to_exitcode(status), out.read_text(), err.read_text()
    )


OUTPUTS = pathlib.Path(sys.argv[1]).resolve().parent  # beside the steps, not in the page's folder
runners = [start_pytest() for step in steps if step.get("file", "").startswith("test_")]


def fail(where, done, what):
    print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
    print(f"FAILED {where}: {what} exited {done.returncode}", file=sys.stderr)
    sys.exit(1)


for step in steps:
    where = f"block {step['block']} (line {step['line']})"
    start = time.monotonic()
    if "python" in step:
        try:
            exec(compile(step["python"], f"<{where}>", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {where}", file=sys.stderr)
            sys.exit(1)
    elif "file" in step:
        pathlib.Path(step["file"]).write_text(step["text"])
        if step["file"].startswith("test_"):
            done = run_pytest(runners.pop(0), step["file"])
            if done.returncode != 0:
                fail(where, done, f"pytest {step['file']}")
            print(f"{where}: pytest {step['file']}: {done.stdout.strip().splitlines()[-1]}")
    elif SHELL_SYNTAX.search(step["shell"]):
        done = subprocess.run(["bash", "-c", step["shell"]], capture_output=True, text=True)
        if done.returncode != 0:
            fail(where, done, step["shell"])
    else:
        # a plain command line runs the entry point's function here, as the shell would
        # run it (variables expanded, words split), without the seconds a new
        # interpreter spends importing shardpipe again
        from shardpipe.cli import main

        argv = shlex.split(os.path.expandvars(step["shell"]))[1:]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as stop:
                status = stop.code if isinstance(stop.code, int) else 1
        if status != 0:
            fail(where, subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue()),
                 step["shell"])
    print(f"{where}: {time.monotonic() - start:.1f} s")
print("ALL RAN")
"""


def stores_named(steps: list[dict[str, object]]) -> dict[str, list[str]]:
    """The buckets and containers the steps name, by kind of store (``s3``, ``gcs``, ``azure``)."""
    code = json.dumps(steps)
    return {kind: sorted(set(found.findall(code))) for kind, found in BUCKETS.items()}


def page_param(page: Path) -> object:
    """``page`` as a test parameter, marked with the emulators it needs."""
    steps = [step for block in blocks(page) for step in block.steps()]
    marks = [getattr(pytest.mark, kind) for kind, names in stores_named(steps).items() if names]
    return pytest.param(page, marks=marks, id=page.name)


@contextmanager
def s3_buckets(names: list[str], request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The moto server's buckets ``names``, and the environment that reaches them."""
    from shardpipe.testing.s3 import REGION, make_bucket

    endpoint = request.getfixturevalue("s3_server")
    for name in names:
        make_bucket(endpoint, name)
    try:
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }
    finally:
        for name in names:
            _empty_and_delete_s3(endpoint, name)


def _empty_and_delete_s3(endpoint: str, bucket: str) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for listing in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in listing.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)


@contextmanager
def gcs_buckets(names: list[str], request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """fake-gcs-server's buckets ``names``, and the environment that reaches them."""
    from shardpipe.testing.gcs import HNS_VARIABLE, make_gcs_bucket, remove_gcs_bucket

    endpoint = request.getfixturevalue("gcs_server")
    for name in names:
        make_gcs_bucket(endpoint, name)
    try:
        yield {"STORAGE_EMULATOR_HOST": endpoint, HNS_VARIABLE: "false"}
    finally:
        for name in names:
            remove_gcs_bucket(endpoint, name)


@contextmanager
def azure_containers(names: list[str], request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Azurite's containers ``names``, and the environment that reaches them."""
    from azure.storage.blob import BlobServiceClient

    from shardpipe.testing.azure import connection_string, make_container

    endpoint = request.getfixturevalue("azurite_server")
    for name in names:
        make_container(endpoint, name)
    try:
        yield {"AZURE_STORAGE_CONNECTION_STRING": connection_string(endpoint)}
    finally:
        service = BlobServiceClient.from_connection_string(connection_string(endpoint))
        for name in names:
            service.delete_container(name)


EMULATORS = {"s3": s3_buckets, "gcs": gcs_buckets, "azure": azure_containers}


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("page", [page_param(page) for page in PAGES])
def test_the_page_runs_as_written(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest, page_server: ForkServer
) -> None:
    steps = [step for block in blocks(page) for step in block.steps()]
    assert steps, f"{page.name} has no example to run"
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("PYTHONPATH", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "STORAGE_EMULATOR_HOST"):
        env.pop(name, None)
    with ExitStack() as stores:
        for kind, names in stores_named(steps).items():
            if names:
                env |= stores.enter_context(EMULATORS[kind](names, request))
        driver = page_server.start(
            None, [str(tmp_path / "steps.json")], code=DRIVER, cwd=work, env=env
        )
        status = driver.wait_or_kill(TIMEOUT)
    if status != 0 or "ALL RAN" not in driver.stdout():
        pytest.fail(f"{page.relative_to(REPOSITORY)}: {driver.stderr()[-4000:]}", pytrace=False)
    print(driver.stdout())  # seconds per step, shown with -s


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_blocks_not_run_are_few_and_say_why(page: Path) -> None:
    skipped = [block for block in blocks(page) if block.not_run is not None]
    assert len(skipped) <= MAX_NOT_RUN, (
        f"{page.name}: {len(skipped)} blocks are not run (lines {[b.line for b in skipped]}); "
        f"at most {MAX_NOT_RUN} may be"
    )
    for block in skipped:
        assert len(block.not_run.split()) >= 2, (  # type: ignore[union-attr]
            f"{page.name} line {block.line}: say why the block is not run, not just that it is not"
        )
        assert block.lang in PYTHON | SHELL | {"text"}, (
            f"{page.name} line {block.line}: {block.lang!r}"
        )
    text = page.read_text()
    marks = len(re.findall(r"<!--\s*not run:", text))
    assert marks == len(skipped), (
        f"{page.name}: a '<!-- not run: ... -->' comment not right above a block"
    )


def test_the_block_reader_sees_indented_blocks_and_marks() -> None:
    page = DOCS / "guides" / "rechunking.md"
    assert any(block.code.startswith("import xarray") for block in blocks(page))
