"""Every example of the getting-started page and the guides runs as written.

A new user pastes a page's blocks, in order, into one Python session (the
```python blocks) and one shell (the lines of ```bash and ```console blocks that
run ``shardpipe``), in an empty folder. Each test does exactly that in a fresh
child process whose working directory is a new temporary folder: the Python
blocks run one after another in one namespace, and the command lines run, between
them in page order, through the installed ``shardpipe`` entry point in the same
folder. A failure names the page, the block, its line and the error.

A block that cannot run as pasted (a signature, a sketch that needs a cluster)
is preceded by ``<!-- not run: why -->``; a page may have at most
:data:`MAX_NOT_RUN` of them, each saying why. Pages that write to ``s3://`` get
the moto server of ``shardpipe.testing.s3`` through ``AWS_ENDPOINT_URL`` and
fake credentials in the child's environment, and the buckets they name are
created first and removed afterwards.

``docs/guides/s3.md`` and ``docs/guides/performance.md`` are not run here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from tests.support import REPOSITORY

DOCS = REPOSITORY / "docs"
EXCLUDED = {"s3.md", "performance.md"}
PAGES = [DOCS / "getting-started.md"] + [
    page
    for page in sorted((DOCS / "guides").glob("*.md"))
    if page.name not in EXCLUDED and not page.name.startswith("cloud-storage")
]
PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "console", "sh", "shell"}
MAX_NOT_RUN = 2
TIMEOUT = 300

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<why>[^>]*)-->\s*\Z")
BUCKET = re.compile(r"\bs3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\b")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    number: int
    line: int
    lang: str
    code: str
    not_run: str | None

    def steps(self) -> list[dict[str, object]]:
        """What the block runs: its code, or the ``shardpipe`` command lines it holds."""
        where = {"block": self.number, "line": self.line}
        if self.not_run is not None:
            return []
        if self.lang in PYTHON:
            return [{**where, "python": self.code}]
        if self.lang not in SHELL:
            return []
        joined = re.sub(r"\\\n\s*", " ", self.code)
        commands = []
        for line in joined.splitlines():
            line = line.strip()
            line = line.removeprefix("$ ")
            if line.startswith("shardpipe "):
                commands.append({**where, "shell": shlex.split(line)})
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
import json, subprocess, sys, time, traceback

steps = json.load(open(sys.argv[1]))
entry_point = sys.argv[2]
namespace = {"__name__": "__main__"}
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
    else:
        argv = [entry_point, *step["shell"][1:]]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            print(f"FAILED {where}: {' '.join(step['shell'])} exited {done.returncode}",
                  file=sys.stderr)
            sys.exit(1)
    print(f"{where}: {time.monotonic() - start:.1f} s")
print("ALL RAN")
"""


def _empty_and_delete(client: object, bucket: str) -> None:
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):  # type: ignore[attr-defined]
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])  # type: ignore[attr-defined]
    for listing in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):  # type: ignore[attr-defined]
        for obj in listing.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])  # type: ignore[attr-defined]
    client.delete_bucket(Bucket=bucket)  # type: ignore[attr-defined]


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_page_runs_as_written(
    page: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    steps = [step for block in blocks(page) for step in block.steps()]
    assert steps, f"{page.name} has no example to run"
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    (tmp_path / "driver.py").write_text(DRIVER)
    bin_dir = Path(sys.executable).parent
    entry_point = bin_dir / "shardpipe"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)

    code = json.dumps(steps)
    buckets = sorted(set(BUCKET.findall(code)))
    client = None
    if buckets:
        endpoint = request.getfixturevalue("s3_server")
        env |= {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
        env.pop("AWS_PROFILE", None)
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(tmp_path / "driver.py"),
                str(tmp_path / "steps.json"),
                str(entry_point),
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        for bucket in buckets:
            if client is not None:
                _empty_and_delete(client, bucket)
    if done.returncode != 0 or "ALL RAN" not in done.stdout:
        pytest.fail(f"{page.relative_to(REPOSITORY)}: {done.stderr[-4000:]}", pytrace=False)
    print(done.stdout)  # seconds per step, shown with -s


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
