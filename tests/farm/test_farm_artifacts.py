"""The farm's artifact service (driver) and content-addressed cache (worker host), on 127.0.0.1.

No Dask here: the service is a real HTTPS server on a free port with certificates made for the
test by ``harness farm init``'s code, the cache a real folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.builds import Build, BuildFile, Manifest
from harness.artifacts.gguf_info import read_model_info
from harness.cli import main
from harness.errors import ConfigError
from harness.farm import FarmError
from harness.farm.artifacts import (
    ArtifactCache,
    ArtifactService,
    FileRef,
    localize,
    service_address,
    strip_paths,
)
from harness.farm.security import FarmTLS, init_farm

BIG = 5 * (1 << 20) + 123  # several blocks, not a multiple of the block size


def ref_of(path: Path) -> FileRef:
    return FileRef(hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size, path.name)


@pytest.fixture
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "driver" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(os.urandom(BIG))
    return path


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("farm") / "tls"
    init_farm(folder)
    return folder


@pytest.fixture
def service(blob: Path, tls_dir: Path) -> Iterator[ArtifactService]:
    with ArtifactService({ref_of(blob).sha256: blob}, tls=FarmTLS(tls_dir, "driver")) as running:
        yield running


def worker(root: Path, service: ArtifactService, token: str | None = None,
           tls: FarmTLS | None = None) -> ArtifactCache:
    """A worker host's cache with the run's token and the agent's certificate (or others')."""
    tls = tls or (FarmTLS(service.tls.folder, "agent") if service.tls else None)
    return ArtifactCache(root, service.token if token is None else token,
                         tls.client_context() if tls else None)


def test_a_missing_file_is_fetched_by_hash_once_and_then_reused(
    tmp_path: Path, blob: Path, service: ArtifactService
) -> None:
    cache = worker(tmp_path / "cache", service)
    ref = ref_of(blob)
    assert service.url.startswith("https://127.0.0.1:")
    path, got, corrupt = cache.ensure(ref, service.url)
    assert (got, corrupt) == (BIG, False)
    assert path == cache.blob(ref.sha256) and path.read_bytes() == blob.read_bytes()
    assert service.bytes_served == BIG
    assert cache.ensure(ref, service.url)[1:] == (0, False)
    assert service.bytes_served == BIG  # nothing moved the second time
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".part")] == []


def test_a_corrupted_cached_file_is_detected_and_replaced(
    tmp_path: Path, blob: Path, service: ArtifactService
) -> None:
    cache = worker(tmp_path / "cache", service)
    ref = ref_of(blob)
    path, _, _ = cache.ensure(ref, service.url)
    path.chmod(0o644)
    with open(path, "r+b") as handle:  # same size, one byte flipped
        handle.seek(1000)
        handle.write(bytes([handle.read(1)[0] ^ 0xFF]))
    path, got, corrupt = cache.ensure(ref, service.url)
    assert (got, corrupt) == (BIG, True)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref.sha256
    assert service.bytes_served == 2 * BIG


def test_bytes_that_do_not_match_the_hash_never_land_in_the_cache(
    tmp_path: Path, blob: Path
) -> None:
    ref = ref_of(blob)
    wrong = tmp_path / "wrong.bin"
    wrong.write_bytes(b"x" * 100)
    with ArtifactService({ref.sha256: wrong}) as lying, \
            pytest.raises(FarmError, match=r"model.gguf .*100 bytes .*expected 5243003 bytes"):
        cache = worker(tmp_path / "cache", lying)  # plaintext (--insecure): the token still
        cache.ensure(ref, lying.url)
    folder = cache.blob(ref.sha256).parent
    assert not cache.blob(ref.sha256).exists()
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".lock")] == []


def test_the_service_serves_only_the_runs_files(blob: Path, service: ArtifactService) -> None:
    cache = worker(blob.parent / "cache", service)
    unknown = FileRef("0" * 64, 1, "other.gguf")
    with pytest.raises(FarmError, match=r"other.gguf .*answered 404"):
        cache.ensure(unknown, service.url)
    with pytest.raises(FarmError, match="is not a sha256"):
        cache.ensure(FileRef("../../etc/passwd", 1, "x"), service.url)


def test_an_unreachable_service_is_one_clear_error(tmp_path: Path, blob: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FarmError) as caught:
        ArtifactCache(tmp_path / "cache").ensure(ref_of(blob), f"http://127.0.0.1:{port}")
    message = str(caught.value)
    assert "cannot reach the driver's artifact service at http://127.0.0.1:" in message
    assert "\n" not in message


def test_a_job_carries_hashes_not_the_drivers_paths(
    tmp_path: Path, blob: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    driver_only = tmp_path / "driver-only-models"
    driver_only.mkdir()
    model = driver_only / "tiny-Q8_0.gguf"
    model.write_bytes(tiny_ladder["Q8_0"].read_bytes())
    models = {("tiny", "Q8_0"): read_model_info(model)}
    shipped_models, shipped_builds, refs, served = strip_paths(
        models, {"host-release": host_build})
    wire = pickle.dumps((shipped_models, shipped_builds, refs))
    assert str(driver_only).encode() not in wire
    assert str(host_build.path).encode() not in wire
    assert served[refs[("tiny", "Q8_0")].sha256] == model.resolve()

    with ArtifactService(served) as service:
        cache = worker(tmp_path / "worker-cache", service)
        local_models, local_builds, fetched = localize(shipped_models, shipped_builds, refs,
                                                       service.url, cache)
        total = model.stat().st_size + sum(f.size for f in host_build.manifest.files)
        assert fetched.bytes == service.bytes_served == total
        again = localize(shipped_models, shipped_builds, refs, service.url, cache)[2]
        assert again.bytes == 0 and service.bytes_served == total
    local_model = Path(local_models[("tiny", "Q8_0")].path)
    assert local_model.name == "tiny-Q8_0.gguf"  # the phone gets it under its own name
    assert local_model.is_relative_to(cache.root)
    build = local_builds["host-release"]
    assert build.path.is_relative_to(cache.root)
    assert build.binary().read_bytes() == host_build.binary().read_bytes()
    assert (build.path / "manifest.json").is_file()


def test_a_build_folder_in_the_cache_links_every_file_by_hash(
    tmp_path: Path, service: ArtifactService, blob: Path
) -> None:
    ref = ref_of(blob)
    manifest = Manifest(name="b", engine="llama.cpp", version=None, commit=None, abi="x86_64",
                        cmake_flags=(), files=(BuildFile("bin/llama-bench", ref.size,
                                                         ref.sha256),),
                        created_at="2026-12-02T00:00:00Z", host="h")
    cache = worker(tmp_path / "cache", service)
    build, fetched = cache.build(Build(Path("b"), manifest), service.url)
    assert fetched.bytes == BIG
    assert (build.path / "bin" / "llama-bench").resolve() == cache.blob(ref.sha256)


def test_the_service_address_can_be_given_and_a_bad_one_is_named() -> None:
    assert service_address("tcp://127.0.0.1:8786") == ("127.0.0.1", 0)
    assert service_address("tcp://x:1", "10.0.0.2:8790") == ("10.0.0.2", 8790)
    assert service_address("tcp://x:1", "10.0.0.2") == ("10.0.0.2", 0)
    with pytest.raises(ConfigError, match=r"artifact service address '10\.0\.0\.2:http'"):
        service_address("tcp://x:1", "10.0.0.2:http")


def test_a_service_port_in_use_is_a_farm_error(blob: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(FarmError, match=r"cannot start the artifact service on 127.0.0.1:"):
            ArtifactService({}, "127.0.0.1", taken.getsockname()[1]).start()


def test_an_agent_cache_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("")
    result = CliRunner().invoke(main, ["farm", "agent", "--scheduler", "tcp://127.0.0.1:9",
                                       "--insecure", "--cache", str(afile / "cache")])
    assert result.exit_code == 2, result.output
    assert f"--cache {afile / 'cache'}: cannot write there" in result.output
    assert "Traceback" not in result.output


def refusals(caplog: pytest.LogCaptureFixture, service: ArtifactService, count: int
             ) -> list[str]:
    """The service's log lines once it has refused ``count`` times (it logs from its own
    connection threads, maybe after the client has given up): one line per refusal."""
    deadline = time.monotonic() + 10
    while service.refused < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return [r.getMessage() for r in caplog.records if r.name == "harness.farm.artifacts"]


def test_a_request_without_the_runs_token_gets_nothing_and_one_log_line(
    tmp_path: Path, blob: Path, service: ArtifactService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "harness.farm.artifacts")
    for token in ("", "not-the-token"):
        with pytest.raises(FarmError, match="answered 401"):
            worker(tmp_path / "cache", service, token=token).ensure(ref_of(blob), service.url)
    lines = refusals(caplog, service, 2)
    assert len(lines) == service.refused == 2, lines
    assert all("refused 127.0.0.1:" in line and "without the run's token" in line
               and "\n" not in line for line in lines), lines
    assert service.bytes_served == 0
    assert not (tmp_path / "cache" / "sha256").exists() or not any(
        p for p in (tmp_path / "cache" / "sha256").rglob("*") if p.is_file()
        and not p.name.endswith(".lock"))


def test_a_connection_without_the_farms_certificate_is_refused_with_one_log_line(
    tmp_path: Path, blob: Path, service: ArtifactService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "harness.farm.artifacts")
    assert service.tls is not None
    other = tmp_path / "other-farm"
    init_farm(other)
    no_certificate = ssl.create_default_context(cafile=str(service.tls.ca_file))
    no_certificate.check_hostname = False
    attempts = [
        # another farm's agent: its certificate was not signed by this farm's CA
        worker(tmp_path / "a", service, tls=FarmTLS(other, "agent")),
        # the right CA to check the server, but no certificate of its own
        ArtifactCache(tmp_path / "b", service.token, no_certificate),
    ]
    for cache in attempts:
        with pytest.raises(FarmError):
            cache.ensure(ref_of(blob), service.url)
    # plaintext HTTP to the TLS port, with the token
    with pytest.raises(FarmError):
        ArtifactCache(tmp_path / "c", service.token).ensure(
            ref_of(blob), service.url.replace("https:", "http:"))
    lines = refusals(caplog, service, 3)
    assert len(lines) == service.refused == 3, lines
    assert all("TLS handshake failed" in line and "\n" not in line for line in lines), lines
    assert service.bytes_served == 0
    assert worker(tmp_path / "d", service).ensure(ref_of(blob), service.url)[1] == BIG


def test_another_roles_certificate_is_refused_with_a_403_and_one_log_line(
    tmp_path: Path, blob: Path, service: ArtifactService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "harness.farm.artifacts")
    assert service.tls is not None
    for role in ("driver", "scheduler"):  # the farm's own CA, the run's token, not a worker
        with pytest.raises(FarmError, match="answered 403"):
            worker(tmp_path / role, service, tls=FarmTLS(service.tls.folder, role)).ensure(
                ref_of(blob), service.url)
    lines = refusals(caplog, service, 2)
    assert len(lines) == service.refused == 2, lines
    for role, line in zip(("driver", "scheduler"), lines, strict=True):
        assert f"with the certificate 'harness farm {role}': artifacts are for the farm's " \
            f"workers (the agent's certificate), not the {role}'s" in line, line
    assert service.bytes_served == 0
    assert worker(tmp_path / "agent", service).ensure(ref_of(blob), service.url)[1] == BIG


def test_the_service_stops_at_once_at_the_end_of_a_run(blob: Path) -> None:
    service = ArtifactService({ref_of(blob).sha256: blob}).start()
    time.sleep(0.05)  # its loop is waiting for a request
    clock = time.monotonic()
    service.close()
    assert time.monotonic() - clock < 0.2  # socketserver's default poll waited up to 0.5 s
