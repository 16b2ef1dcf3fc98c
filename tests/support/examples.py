"""How many examples a hypothesis test draws: its ``ci`` count, scaled by the loaded profile.

A test that pins ``max_examples`` to a number draws that many under every profile, so
``HYPOTHESIS_PROFILE=thorough`` would not search it harder. ``scaled(n)`` is ``n`` under
the ``ci`` profile and grows with the profile's ``max_examples`` (12.5 times under
``thorough``): a test that needs more or fewer examples than the default says so
relative to ``ci``, and a thorough run searches every test harder alike.
"""

from __future__ import annotations

from hypothesis import settings

CI_EXAMPLES = 40
"""``max_examples`` of the ``ci`` profile (``tests/conftest.py``)."""


def scaled(n: int) -> int:
    """``n`` examples under the ``ci`` profile, in proportion under the loaded one (at least 1)."""
    return max(1, n * settings.default.max_examples // CI_EXAMPLES)
