"""The scheduler checks the role in each peer's certificate (a Dask preload).

``harness farm scheduler --tls`` starts Dask's scheduler with ``--preload harness.farm.roles``
(a scheduler you start yourself takes the same flag). Every request that reaches the scheduler
is checked against the role in the peer's certificate (``harness-role:<role>``, see
``harness.farm.security``) before Dask handles it:

- ``register-worker`` (a worker joining) needs the agent's certificate;
- the few other requests a worker makes (heartbeats, ``who_has``, retiring itself, resources)
  take the agent's or the driver's;
- everything else, ``register-client`` (a driver, or any Dask client) first, needs the driver's;
- ``identity`` (what Dask asks before registering) answers any certificate of the farm.

The scheduler's own certificate is for its end of the connections only. A refused request gets
one line on the scheduler's log (``harness farm: refused register-client from tls://...``), an
answer in the shape the asker expects (a Dask worker exits with that reason, a Dask client
raises it), and its connection is closed. The TLS handshake has already checked that the
certificate is the farm's; a certificate of another farm never gets this far.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from harness.farm.security import REISSUE, peer_name, peer_role

log = logging.getLogger("distributed.scheduler")

REGISTER_WORKER = "register-worker"
REGISTER_CLIENT = "register-client"
ANY_ROLE_OPS = frozenset({"identity"})
# what a Dask worker asks the scheduler besides its stream (distributed.worker, no nanny)
WORKER_OPS = frozenset({REGISTER_WORKER, "heartbeat_worker", "who_has", "retire_workers",
                        "set_resources", "unregister", "register_nanny"})


def refusal(op: str, role: str | None) -> str | None:
    """Why a peer with a certificate of ``role`` (None: none) may not ask ``op``, or None."""
    if op in ANY_ROLE_OPS:
        return None
    if role is None:
        return (f"its certificate carries no farm role (made before harness put roles in "
                f"certificates); run `{REISSUE}` where ca.key is and copy each host its role's "
                ".pem again")
    if op in WORKER_OPS and role == "agent":
        return None
    if op == REGISTER_WORKER:
        return f"a worker needs the agent's certificate, not the {role}'s"
    if role == "driver":
        return None
    what = "a client (driver)" if op == REGISTER_CLIENT else f"{op!r} (a client's request)"
    return f"{what} needs the driver's certificate, not the {role}'s"


def refusal_line(op: str, peer: str, name: str, reason: str) -> str:
    """The one log line of a refused request."""
    return f"harness farm: refused {op} from {peer} (certificate {name!r}): {reason}"


def _peercert(comm: Any) -> dict[str, Any] | None:
    extra = getattr(comm, "extra_info", None) or {}
    cert = extra.get("peercert")
    return cert if isinstance(cert, dict) else None


def _answer(op: str, reason: str) -> Any:
    """What the refused asker reads instead of its answer: the shape it expects."""
    from distributed.core import error_message

    if op == REGISTER_WORKER:  # distributed.Worker: logs the message, raises, exits
        return {"status": "error", "time": time.time(),
                "message": f"refused by the farm: {reason}"}
    if op == REGISTER_CLIENT:  # distributed.Client raises the error of its stream-start
        return [{"op": "stream-start", "error": f"refused by the farm: {reason}"}]
    return error_message(PermissionError(f"refused by the farm: {reason}"))


def guard(op: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler`` behind the role check of ``op``; Dask calls it with the comm first."""
    from distributed.core import Status
    from distributed.utils import has_keyword

    expects_comm = next(iter(inspect.signature(handler).parameters), None) == "comm"
    wants_serializers = has_keyword(handler, "serializers")

    async def guarded(comm: Any, serializers: Any = None, **msg: Any) -> Any:
        cert = _peercert(comm)
        reason = refusal(op, peer_role(cert))
        if reason is not None:
            log.warning(refusal_line(op, str(comm.peer_address), peer_name(cert), reason))
            with contextlib.suppress(Exception):  # the peer went away: nothing more to tell it
                await comm.write(_answer(op, reason))
            comm.abort()
            return Status.dont_reply
        if wants_serializers and serializers is not None:
            msg["serializers"] = serializers
        result = handler(comm, **msg) if expects_comm else handler(**msg)
        if inspect.isawaitable(result):
            result = await result
        return result

    guarded.__name__ = f"farm_role_checked_{getattr(handler, '__name__', op)}"
    return guarded


class GuardedHandlers(dict[str, Callable[..., Any]]):
    """The scheduler's handlers, each behind its role check, also those added later (Dask
    looks a request's handler up with ``handlers[op]`` every time)."""

    def __init__(self, handlers: dict[str, Callable[..., Any]]) -> None:
        super().__init__(handlers)
        self._guarded: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}

    def __getitem__(self, op: str) -> Callable[..., Any]:
        handler = super().__getitem__(op)
        known = self._guarded.get(op)
        if known is None or known[0] is not handler:
            known = self._guarded[op] = (handler, guard(op, handler))
        return known[1]


def dask_setup(scheduler: Any) -> None:
    """Dask's preload hook: put the role check in front of every scheduler handler.

    Dask reads no request before the scheduler has started (``Server._handle_comm`` awaits it),
    and preloads run within that start, so no request passes unchecked.
    """
    scheduler.handlers = GuardedHandlers(scheduler.handlers)
    log.info("harness farm: roles checked: a worker needs the agent's certificate, a client "
             "the driver's")
