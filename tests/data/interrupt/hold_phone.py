"""Not part of the suite (its name does not start with test_): tests/test_interrupt.py runs it
in a pytest session of its own and stops that session with SIGTERM while it holds a phone."""

from __future__ import annotations

import time

from fixtures_phones import PhoneFactory


def test_hold_a_virtual_phone(virtual_phones: PhoneFactory) -> None:
    virtual_phones()
    time.sleep(300)  # stopped long before this ends
