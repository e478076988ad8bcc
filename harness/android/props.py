"""``getprop`` output: ``[key]: [value]`` lines; a value may span several lines."""

from __future__ import annotations

import re

_PROP = re.compile(r"^\[(?P<key>[^\]]+)\]: \[(?P<value>.*)$")


def parse_getprop(text: str) -> dict[str, str]:
    """All properties; lines that are not properties are skipped."""
    props: dict[str, str] = {}
    key: str | None = None
    pending: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if key is None:
            match = _PROP.match(line)
            if match is None:
                continue
            key, pending = match.group("key"), [match.group("value")]
        else:
            pending.append(line)
        if pending[-1].endswith("]"):
            pending[-1] = pending[-1][:-1]
            props[key] = "\n".join(pending)
            key, pending = None, []
    return props
