"""Which address of this machine the farm reaches: the one on its route to the scheduler.

A UDP socket's ``connect`` only asks the kernel for the route (no packet is sent), and
``getsockname`` then names the source address the kernel would use: this host's address on the
interface that leads to the scheduler. It works inside network namespaces and needs nothing
beyond the standard library.
"""

from __future__ import annotations

import socket
import urllib.parse

from harness.errors import ConfigError
from harness.farm import FarmError

DEFAULT_PORT = 8786  # Dask's scheduler port


def scheduler_endpoint(scheduler: str) -> tuple[str, int]:
    """(host, port) of a scheduler address such as ``tls://lab1:8786``."""
    parts = urllib.parse.urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as error:
        raise ConfigError(f"scheduler {scheduler}: the port is not a number 0-65535") from error
    return parts.hostname or "127.0.0.1", port


def address_towards(host: str, port: int) -> str:
    """This machine's address on the route to ``host:port``; OSError when there is none."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)  # no packet is sent: the kernel picks the route
                return str(probe.getsockname()[0])
        except OSError as failed:
            error = failed
    raise error


def route_address(scheduler: str, hint: str) -> str:
    """This machine's address towards the scheduler, or a FarmError ending with ``hint``."""
    host, port = scheduler_endpoint(scheduler)
    try:
        return address_towards(host, port)
    except OSError as error:
        raise FarmError(f"cannot tell which address of this machine reaches the scheduler at "
                        f"{host} ({error.strerror or error}); {hint}") from error
