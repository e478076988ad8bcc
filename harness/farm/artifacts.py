"""Builds and models on the farm without shared folders: a content-addressed cache per agent.

The driver starts an :class:`ArtifactService`, a small HTTP server on a port it binds, that serves
only the files of the run, each named by its sha256 (``GET /sha256/<hex>``), and with TLS only to
the workers' certificate (the agent's role; any other role is a 403); a job request carries
those hashes (and the build manifests, which list a hash per file), never a driver path. On the
worker, :class:`ArtifactCache` gets what its folder lacks, streaming it to a temporary file in the
cache folder while hashing it, and renames it into place only when size and sha256 match, so a
killed download never leaves a file that looks complete. A cached file is verified on use: the
full sha256 the first time a worker process uses that version of the file (the process remembers
the digest by path, size and mtime, ``hashing.cached_file_sha256``, which the push to the phone
asks for anyway), so a file changed in the cache since is hashed again; a mismatch is deleted and
fetched again. Later runs find everything and transfer nothing.

Layout of a cache folder::

    sha256/<2 hex>/<sha256>     the bytes, read-only
    models/<sha256>/<name>      a symlink to them under the model's own file name
    builds/<name>-<digest>/     a build folder: symlinks to the blobs, and manifest.json

HTTP and not Dask's own channels: Dask sends a task's data as one message held in memory at both
ends, while a model is hundreds of MB; HTTP streams it, the driver can count what it served, and
a worker host reaches the driver the same way the driver reaches the scheduler.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import http.server
import logging
import os
import re
import secrets
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.artifacts.builds import MANIFEST, Build
from harness.artifacts.gguf_info import ModelInfo
from harness.artifacts.hashing import cached_file_sha256
from harness.errors import ConfigError
from harness.farm import FarmError
from harness.farm.route import route_address, scheduler_endpoint
from harness.farm.security import REISSUE, TLS_ENV, FarmTLS, peer_name, peer_role
from harness.units import MIB

CACHE_ENV = "HARNESS_FARM_CACHE"  # the agent passes its --cache to its workers through this
ADDRESS_ENV = "HARNESS_ARTIFACT_ADDRESS"  # HOST[:PORT] the driver's artifact service binds
BLOCK = MIB
TIMEOUT_S = 60.0
# how often the service's loop looks for its stop: a run's end waits for it (socketserver's
# default, 0.5 s, was a quarter of a second at the end of every run on average)
SHUTDOWN_POLL_S = 0.02
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PATH = re.compile(r"^/sha256/([0-9a-f]{64})$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileRef:
    """One file a job needs, by content: its hash, its size and the name it goes by."""

    sha256: str
    size: int
    name: str


@dataclass(frozen=True)
class Fetched:
    """What a worker did to have a job's files: bytes downloaded, files replaced as corrupt."""

    bytes: int = 0
    files: int = 0
    corrupt: tuple[str, ...] = ()  # names of cached files whose sha256 no longer matched

    def plus(self, got: int, corrupt: str | None = None) -> Fetched:
        return Fetched(self.bytes + got, self.files + (1 if got else 0),
                       self.corrupt + ((corrupt,) if corrupt else ()))

    def __add__(self, other: Fetched) -> Fetched:
        return Fetched(self.bytes + other.bytes, self.files + other.files,
                       self.corrupt + other.corrupt)


def default_cache_dir() -> Path:
    """``$HARNESS_FARM_CACHE``, else ``$HARNESS_CACHE/farm/artifacts`` (``~/.cache/harness``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    root = os.environ.get("HARNESS_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "harness") / "farm" / "artifacts"


def check_cache_dir(path: Path) -> Path:
    """The cache folder, made if needed; a ConfigError when it cannot be written."""
    path = path.expanduser().absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"--cache {path}: cannot write there ({error.strerror or error})") \
            from error
    return path


# -- the driver side ---------------------------------------------------------------------------

def model_ref(info: ModelInfo) -> FileRef:
    path = Path(info.path)
    return FileRef(cached_file_sha256(path), path.stat().st_size, path.name)


def strip_paths(models: Mapping[tuple[str, str], Any], builds: Mapping[str, Build]
                ) -> tuple[dict[tuple[str, str], Any], dict[str, Build],
                           dict[tuple[str, str], FileRef], dict[str, Path]]:
    """The run's models and builds with the driver's paths taken out, what the job refers to
    (model key -> FileRef) and what the service serves (sha256 -> driver path)."""
    served: dict[str, Path] = {}
    refs: dict[tuple[str, str], FileRef] = {}
    out_models: dict[tuple[str, str], Any] = {}
    for key, info in models.items():
        if isinstance(info, ModelInfo):
            ref = model_ref(info)
            refs[key] = ref
            served[ref.sha256] = Path(info.path).resolve()
            info = replace(info, path=ref.name)  # only its name travels
        out_models[key] = info
    out_builds: dict[str, Build] = {}
    for name, build in builds.items():
        for entry in build.manifest.files:
            served[entry.sha256] = (build.path / entry.path).resolve()
        out_builds[name] = Build(Path(name), build.manifest)
    return out_models, out_builds, refs, served


def artifact_refusal(role: str | None) -> str | None:
    """Why a peer with a certificate of ``role`` may not fetch artifacts, or None: only the
    workers (the agent's certificate) fetch them."""
    if role == "agent":
        return None
    if role is None:
        return f"the certificate carries no farm role; run `{REISSUE}` and copy it again"
    return f"artifacts are for the farm's workers (the agent's certificate), not the {role}'s"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.server.tls is not None:
            cert = self.connection.getpeercert()
            why = artifact_refusal(peer_role(cert))
            if why is not None:
                self.server.refuse(self.client_address, f"GET {self.path[:80]!r} with the "
                                   f"certificate {peer_name(cert)!r}: {why}")
                self.send_error(403, why)
                return
        if not self.server.authorized(self.headers.get("Authorization", "")):
            self.server.refuse(self.client_address, f"GET {self.path[:80]!r} without the run's "
                               "token")
            self.send_error(401, "the run's token is required")
            return
        match = _PATH.match(urllib.parse.urlsplit(self.path).path)
        path = self.server.files.get(match.group(1)) if match else None
        if path is None:
            self.send_error(404, "not an artifact of this run")
            return
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            self.send_error(410, "the driver can no longer read this file")
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            while block := handle.read(BLOCK):
                self.wfile.write(block)
                self.server.count(len(block))

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], files: Mapping[str, Path], token: str,
                 tls: ssl.SSLContext | None) -> None:
        super().__init__(address, _Handler)
        self.files = dict(files)
        self.token = token
        self.tls = tls
        self.served = 0
        self.requests = 0
        self.refused = 0
        self.lock = threading.Lock()

    def count(self, n: int) -> None:
        with self.lock:
            self.served += n

    def authorized(self, header: str) -> bool:
        scheme, _, given = header.partition(" ")
        return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(),
                                                          self.token.encode())

    def refuse(self, client: Any, why: str) -> None:
        """One line on the driver's log per refused connection or request."""
        with self.lock:
            self.refused += 1
        host, port = (client[0], client[1]) if isinstance(client, tuple) else (client, "")
        log.warning("artifact service %s: refused %s:%s: %s", self.where, host, port, why)

    @property
    def where(self) -> str:
        host, port = self.server_address[:2]
        return f"{host if isinstance(host, str) else host.decode()}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.requests += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """TLS first (in the connection's own thread: a slow handshake holds no one else up);
        a peer without a certificate from the farm's CA gets nothing."""
        if self.tls is not None:
            try:
                request.settimeout(TIMEOUT_S)
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as error:
                reason = getattr(error, "reason", None) or error
                self.refuse(client_address, f"TLS handshake failed ({reason})")
                self.shutdown_request(request)
                return
        super().process_request_thread(request, client_address)


@dataclass
class ArtifactService:
    """The driver's file server for one run: the run's files by sha256, nothing else."""

    files: Mapping[str, Path]
    host: str = "127.0.0.1"
    port: int = 0
    tls: FarmTLS | None = None  # the driver's certificates; None: plaintext (--insecure)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)  # per run
    _server: _Server | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None, "service not started"
        host, port = self._server.server_address[:2]
        host = str(host)
        scheme = "https" if self.tls else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    @property
    def bytes_served(self) -> int:
        return self._server.served if self._server else 0

    @property
    def refused(self) -> int:
        """Connections and requests refused (no farm certificate, no token)."""
        return self._server.refused if self._server else 0

    def start(self) -> ArtifactService:
        try:
            context = self.tls.server_context() if self.tls else None
            self._server = _Server((self.host, self.port), self.files, self.token, context)
        except OSError as error:
            raise FarmError(f"cannot start the artifact service on {self.host}:{self.port} "
                            f"({error.strerror or error}); set ${ADDRESS_ENV}=HOST[:PORT] to an "
                            "address of this machine the farm hosts can reach") from error
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True,
                                        name="artifact-service")
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ArtifactService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def service_address(scheduler: str, explicit: str | None = None) -> tuple[str, int]:
    """Where the artifact service binds: ``explicit`` / ``$HARNESS_ARTIFACT_ADDRESS``
    (``HOST[:PORT]``), else this machine's address on the route to the scheduler, any port
    (127.0.0.1 when the scheduler is local)."""
    text = explicit or os.environ.get(ADDRESS_ENV)
    if text:
        host, sep, port = text.rpartition(":")
        if not sep:
            host, port = text, "0"
        if not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"artifact service address {text!r}: write HOST or HOST:PORT "
                              "(e.g. 10.0.0.2:8790)")
        return host.strip("[]"), int(port)
    if scheduler_endpoint(scheduler)[0] in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1", 0
    return route_address(scheduler, f"set ${ADDRESS_ENV}"), 0


# -- the worker side ---------------------------------------------------------------------------

class ArtifactCache:
    """A worker host's content-addressed cache (see the module docstring for the layout)."""

    def __init__(self, root: Path, token: str = "", tls: ssl.SSLContext | None = None) -> None:
        self.root = Path(root)
        self.token = token  # the run's token, sent with every request
        self.tls = tls  # the agent's TLS towards an https:// service

    def blob(self, sha256: str) -> Path:
        if not _SHA.match(sha256):
            raise FarmError(f"artifact hash {sha256!r} is not a sha256")
        return self.root / "sha256" / sha256[:2] / sha256

    def _intact(self, path: Path, ref: FileRef) -> bool:
        try:
            return path.stat().st_size == ref.size and cached_file_sha256(path) == ref.sha256
        except OSError:
            return False

    def ensure(self, ref: FileRef, url: str) -> tuple[Path, int, bool]:
        """The cached file of ``ref``, fetched from ``url`` if missing or corrupt: (path, bytes
        downloaded, whether a corrupt copy was replaced)."""
        path = self.blob(ref.sha256)
        if self._intact(path, ref):
            return path, 0, False
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f".{ref.sha256}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download per file per host at a time
            exists = path.exists()
            if exists and self._intact(path, ref):  # another worker fetched it meanwhile
                return path, 0, False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return path, self._download(ref, url, path), exists

    def _download(self, ref: FileRef, url: str, path: Path) -> int:
        where = f"{url}/sha256/{ref.sha256}"
        what = f"artifact {ref.name} (sha256 {ref.sha256[:12]})"
        tmp = path.parent / f".{ref.sha256}.{uuid.uuid4().hex}.part"
        digest = hashlib.sha256()
        size = 0
        try:
            try:
                request = urllib.request.Request(
                    where, headers={"Authorization": f"Bearer {self.token}"})
                response = urllib.request.urlopen(
                    request, timeout=TIMEOUT_S,
                    context=self.tls if where.startswith("https:") else None)
            except urllib.error.HTTPError as error:
                raise FarmError(f"{what}: the driver's artifact service at {url} answered "
                                f"{error.code} {error.reason}") from error
            except (urllib.error.URLError, OSError) as error:
                reason = getattr(error, "reason", None) or error
                raise FarmError(f"{what}: cannot reach the driver's artifact service at {url} "
                                f"({reason}) from {socket.gethostname()}") from error
            with response, open(tmp, "wb") as out:
                while block := response.read(BLOCK):
                    out.write(block)
                    digest.update(block)
                    size += len(block)
                out.flush()
                os.fsync(out.fileno())
            if size != ref.size or digest.hexdigest() != ref.sha256:
                raise FarmError(f"{what}: {size} bytes with sha256 {digest.hexdigest()[:12]} "
                                f"came from {url}; expected {ref.size} bytes (the driver's file "
                                "changed since the run was planned?)")
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except OSError as error:
            raise FarmError(f"{what}: download from {url} failed on {socket.gethostname()} "
                            f"({error})") from error
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return size

    def _link(self, link: Path, target: Path) -> None:
        if link.is_symlink() and os.readlink(link) == str(target):
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.parent / f".{link.name}.{uuid.uuid4().hex}"
        os.symlink(target, tmp)
        os.replace(tmp, link)

    def model(self, ref: FileRef, url: str) -> tuple[Path, int, bool]:
        blob, fetched, corrupt = self.ensure(ref, url)
        link = self.root / "models" / ref.sha256 / ref.name
        self._link(link, blob)
        return link, fetched, corrupt

    def build(self, build: Build, url: str) -> tuple[Build, Fetched]:
        """A local folder of the build (its manifest's files, by hash) and what it cost."""
        manifest = build.manifest
        digest = hashlib.sha256("".join(f"{f.path}:{f.sha256}\n" for f in manifest.files)
                                .encode()).hexdigest()[:16]
        folder = self.root / "builds" / f"{manifest.name}-{digest}"
        fetched = Fetched()
        for entry in manifest.files:
            blob, got, corrupt = self.ensure(FileRef(entry.sha256, entry.size, entry.path), url)
            self._link(folder / entry.path, blob)
            fetched = fetched.plus(got, entry.path if corrupt else None)
        manifest_file = folder / MANIFEST
        text = manifest.to_json()
        if not manifest_file.is_file() or manifest_file.read_text() != text:
            tmp = folder / f".{MANIFEST}.{uuid.uuid4().hex}"
            tmp.write_text(text)
            os.replace(tmp, manifest_file)
        return Build(folder, manifest), fetched


def worker_tls(url: str) -> ssl.SSLContext | None:
    """The TLS a worker uses towards the artifact service at ``url``: the agent's certificates
    (``$HARNESS_FARM_TLS``, set by a ``--tls`` agent) for https, none for a plaintext run."""
    if not url.startswith("https:"):
        return None
    folder = os.environ.get(TLS_ENV)
    if not folder:
        raise FarmError(f"the driver serves artifacts over TLS ({url}) and this worker has no "
                        "farm certificates: start its agent with --tls DIR")
    return FarmTLS(Path(folder), "agent").check().client_context()


def localize(models: Mapping[tuple[str, str], Any], builds: Mapping[str, Build],
             refs: Mapping[tuple[str, str], FileRef], url: str, cache: ArtifactCache
             ) -> tuple[dict[tuple[str, str], Any], dict[str, Build], Fetched]:
    """The job's models and builds at paths in this host's cache, fetched where missing."""
    fetched = Fetched()
    out_models: dict[tuple[str, str], Any] = {}
    for key, info in models.items():
        if isinstance(info, ModelInfo):
            if key not in refs:
                raise FarmError(f"model {key[0]} {key[1]}: the job names no hash for it")
            path, got, corrupt = cache.model(refs[key], url)
            fetched = fetched.plus(got, refs[key].name if corrupt else None)
            info = replace(info, path=str(path))
        out_models[key] = info
    out_builds: dict[str, Build] = {}
    for name, build in builds.items():
        out_builds[name], got_build = cache.build(build, url)
        fetched += got_build
    return out_models, out_builds, fetched


