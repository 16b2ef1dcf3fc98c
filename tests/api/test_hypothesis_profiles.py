"""The suite's hypothesis profiles: derandomized by default, random and longer by hand."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.examples import CI_EXAMPLES, scaled

PROBE = """
from hypothesis import settings


def test_probe():
    s = settings.default
    print(f"PROFILE derandomize={s.derandomize} database={s.database} n={s.max_examples}")
"""


def _run_probe(*args: str, profile: str | None = None) -> str:
    """Run a one-test module under the suite's conftest; what its settings were.

    The child pytest loads only the plugins a profile needs (hypothesis's, and
    pytest-timeout's for the ``timeout`` setting of the configuration), not the
    emulators' plugins: importing those (and shardpipe with them) took most of
    each run's seconds and has no part in choosing a profile.
    """
    root = Path(__file__).resolve().parents[2]
    probe = root / "tests" / "api" / f"_profile_probe_{os.getpid()}.py"  # not a test_ name
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if profile:
        env["HYPOTHESIS_PROFILE"] = profile
    probe.write_text(PROBE)
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(probe),
                "-s",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "_hypothesis_pytestplugin",
                "-p",
                "pytest_timeout",
                *(f"-pno:shardpipe.testing.{cloud}" for cloud in ("s3", "gcs", "azure")),
                *args,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        probe.unlink()
    assert run.returncode == 0, run.stdout + run.stderr
    return next(line for line in run.stdout.splitlines() if "PROFILE" in line)


def test_the_default_profile_is_derandomized(request: pytest.FixtureRequest) -> None:
    """Issue 32: a property test failed on some seeds only, so CI could pass where users fail."""
    if request.config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE"):
        pytest.skip("a profile was chosen for this run")
    assert settings.default.derandomize is True
    assert settings.default.database is None
    assert settings.default.deadline is None


def test_profiles_as_pytest_selects_them() -> None:
    """No choice: "ci"; ``--hypothesis-profile thorough`` or the variable: random, 500."""
    assert "derandomize=True database=None n=40" in _run_probe()
    thorough = _run_probe("--hypothesis-profile", "thorough")
    assert "derandomize=False" in thorough and "n=500" in thorough
    assert "derandomize=False" in _run_probe(profile="thorough")


def test_scaled_counts_follow_the_loaded_profile() -> None:
    """A test's own count is its count under "ci"; "thorough" searches it 12.5 times harder."""
    loaded = settings.default
    assert settings.get_profile("ci").max_examples == CI_EXAMPLES
    try:
        settings.load_profile("ci")
        assert (scaled(80), scaled(3)) == (80, 3)
        settings.load_profile("thorough")
        assert (scaled(80), scaled(3)) == (1000, 37)
    finally:
        settings.register_profile("_loaded_before", loaded)
        settings.load_profile("_loaded_before")


def test_no_test_pins_its_example_count() -> None:
    """A count pinned to a number draws as many under "thorough": counts go through ``scaled``."""
    tests = Path(__file__).resolve().parents[1]
    pinned = [
        f"{path.relative_to(tests)}:{number}"
        for path in sorted(tests.rglob("*.py"))
        if path.name != "conftest.py"  # where the profiles are registered
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"max_examples\s*=\s*(\d|settings\.default)", line)
    ]
    assert pinned == []
