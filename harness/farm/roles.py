"""Every farm process checks the role in each peer's certificate (a Dask preload).

``harness farm scheduler --tls`` starts Dask's scheduler, and ``harness farm agent --tls`` each
of its workers, with ``--preload harness.farm.roles`` (a scheduler or worker you start yourself
takes the same flag). Every request that reaches them is checked against the role in the peer's
certificate (``harness-role:<role>``, see ``harness.farm.security``) before Dask handles it.

At the scheduler:

- ``register-worker`` (a worker joining) needs the agent's certificate;
- the few other requests a worker makes (heartbeats, ``who_has``, retiring itself, resources)
  take the agent's or the driver's;
- everything else, ``register-client`` (a driver, or any Dask client) first, needs the driver's;
- ``identity`` (what Dask asks before registering) answers any certificate of the farm.

At a worker (it listens on its host's routable address, where any farm host can reach it):

- ``get_data`` (a task's inputs fetched by another worker, the scheduler's gather) takes the
  agent's certificate (a peer worker) or the scheduler's;
- everything else (``run``, ``run_coroutine``, ``upload_file``, ``plugin-add``, ``update_data``,
  ``connection_stream`` with its task messages, ``terminate``, ...) only the scheduler's: the
  driver reaches the workers through the scheduler, never directly.

A refused request gets one line on the process's log (``harness farm: refused register-client
from tls://...``), an answer in the shape the asker expects (a Dask worker exits with that
reason, a Dask client raises it), and its connection is closed. The TLS handshake has already
checked that the certificate is the farm's; a certificate of another farm never gets this far.
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
worker_log = logging.getLogger("distributed.worker")
Policy = Callable[[str, str | None], str | None]  # (op, peer's role) -> why refused, or None

REGISTER_WORKER = "register-worker"
REGISTER_CLIENT = "register-client"
ANY_ROLE_OPS = frozenset({"identity"})
# what a Dask worker asks the scheduler besides its stream (distributed.worker, no nanny)
WORKER_OPS = frozenset({REGISTER_WORKER, "heartbeat_worker", "who_has", "retire_workers",
                        "set_resources", "unregister", "register_nanny"})
# what a worker answers a peer worker (distributed.worker.get_data_from_worker): data transfer
PEER_OPS = frozenset({"get_data"})
NO_ROLE = ("its certificate carries no farm role (made before harness put roles in "
           f"certificates); run `{REISSUE}` where ca.key is and copy each host its role's .pem "
           "again")


def refusal(op: str, role: str | None) -> str | None:
    """Why a peer with a certificate of ``role`` (None: none) may not ask ``op``, or None."""
    if op in ANY_ROLE_OPS:
        return None
    if role is None:
        return NO_ROLE
    if op in WORKER_OPS and role == "agent":
        return None
    if op == REGISTER_WORKER:
        return f"a worker needs the agent's certificate, not the {role}'s"
    if role == "driver":
        return None
    what = "a client (driver)" if op == REGISTER_CLIENT else f"{op!r} (a client's request)"
    return f"{what} needs the driver's certificate, not the {role}'s"


def worker_refusal(op: str, role: str | None) -> str | None:
    """Why a peer with a certificate of ``role`` may not ask a worker ``op``, or None."""
    if role is None:
        return NO_ROLE
    if role == "scheduler" or (role == "agent" and op in PEER_OPS):
        return None
    needs = "the scheduler's or a peer worker's (agent)" if op in PEER_OPS else \
        "the scheduler's"
    return f"{op!r} on a worker needs {needs} certificate, not the {role}'s"


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


def guard(op: str, handler: Callable[..., Any], policy: Policy = refusal,
          logger: logging.Logger = log) -> Callable[..., Any]:
    """``handler`` behind ``policy``'s role check of ``op``; Dask calls it with the comm
    first."""
    from distributed.core import Status
    from distributed.utils import has_keyword

    expects_comm = next(iter(inspect.signature(handler).parameters), None) == "comm"
    wants_serializers = has_keyword(handler, "serializers")

    async def guarded(comm: Any, serializers: Any = None, **msg: Any) -> Any:
        cert = _peercert(comm)
        reason = policy(op, peer_role(cert))
        if reason is not None:
            logger.warning(refusal_line(op, str(comm.peer_address), peer_name(cert), reason))
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
    """A server's handlers, each behind its role check, also those added later (Dask looks a
    request's handler up with ``handlers[op]`` every time)."""

    def __init__(self, handlers: dict[str, Callable[..., Any]], policy: Policy = refusal,
                 logger: logging.Logger = log) -> None:
        super().__init__(handlers)
        self.policy = policy
        self.logger = logger
        self._guarded: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}

    def __getitem__(self, op: str) -> Callable[..., Any]:
        handler = super().__getitem__(op)
        known = self._guarded.get(op)
        if known is None or known[0] is not handler:
            checked = guard(op, handler, self.policy, self.logger)
            known = self._guarded[op] = (handler, checked)
        return known[1]


def dask_setup(server: Any) -> None:
    """Dask's preload hook: put the role check in front of every handler of the scheduler or
    worker ``server``.

    Dask reads no request before the server has started (``Server._handle_comm`` awaits it),
    and preloads run within that start, so no request passes unchecked.
    """
    from distributed import Worker

    if isinstance(server, Worker):
        server.handlers = GuardedHandlers(server.handlers, worker_refusal, worker_log)
        worker_log.info("harness farm: roles checked: get_data takes a peer worker's (agent) "
                        "or the scheduler's certificate, everything else the scheduler's")
        return
    server.handlers = GuardedHandlers(server.handlers)
    log.info("harness farm: roles checked: a worker needs the agent's certificate, a client "
             "the driver's")
