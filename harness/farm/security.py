"""The farm's credentials: a small CA of its own, one certificate per role, TLS everywhere.

``harness farm init DIR`` makes the farm's certificate authority and a certificate for each role
(``scheduler``, ``agent``, ``driver``), EC P-256, signed by that CA. Dask's TLS then encrypts
every connection and checks the certificate of *both* ends against the farm's CA
(``distributed.Security`` with ``require_encryption``; Dask's TLS contexts ask for the peer's
certificate on the server side as well). The same files secure the driver's artifact service:
the driver serves over TLS with its certificate, asks each worker for the agent certificate, and
wants the run's token on every request (``harness.farm.artifacts``).

Identity is "holds a certificate signed by this farm's CA", as in Dask (which does not check host
names): the CA's key (``ca.key``) signs, and must stay on the machine where ``init`` ran; the
hosts get ``ca.pem`` and their role's ``.pem`` and ``.key``.

Plaintext needs ``--insecure`` on every command, and a run says which it was in its meta.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

ROLES = ("scheduler", "agent", "driver")
CA_CERT = "ca.pem"
CA_KEY = "ca.key"
TLS_ENV = "HARNESS_FARM_TLS"  # the folder of the farm's certificates (for --tls)
VALID_DAYS = 825


def _files(role: str) -> tuple[str, str]:
    return f"{role}.pem", f"{role}.key"


@dataclass(frozen=True)
class FarmTLS:
    """One role's view of the farm's certificates: the CA, its own certificate and key."""

    folder: Path
    role: str

    @property
    def ca_file(self) -> Path:
        return self.folder / CA_CERT

    @property
    def cert_file(self) -> Path:
        return self.folder / _files(self.role)[0]

    @property
    def key_file(self) -> Path:
        return self.folder / _files(self.role)[1]

    def check(self) -> FarmTLS:
        """Self, or a ConfigError naming the first file missing."""
        for path in (self.ca_file, self.cert_file, self.key_file):
            if not path.is_file():
                raise ConfigError(
                    f"--tls {self.folder}: {path.name} is missing; make the farm's certificates "
                    f"with `harness farm init DIR` and copy {CA_CERT}, {self.cert_file.name} and "
                    f"{self.key_file.name} to this host")
        return self

    def ca_fingerprint(self) -> str:
        """sha256 of the CA certificate's file: which farm a run's meta belongs to."""
        return hashlib.sha256(self.ca_file.read_bytes()).hexdigest()[:16]

    # -- Dask -----------------------------------------------------------------------------
    def dask_args(self) -> list[str]:
        """``dask scheduler``/``dask worker`` options for this role's TLS."""
        return ["--tls-ca-file", str(self.ca_file), "--tls-cert", str(self.cert_file),
                "--tls-key", str(self.key_file)]

    def security(self) -> Any:
        """A ``distributed.Security`` for a client (the driver) or any role's client side."""
        from distributed import Security

        return Security(tls_ca_file=str(self.ca_file), tls_client_cert=str(self.cert_file),
                        tls_client_key=str(self.key_file), require_encryption=True)

    # -- the artifact service -------------------------------------------------------------
    def server_context(self) -> ssl.SSLContext:
        """TLS for the artifact service: our certificate, and the client's checked."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def client_context(self) -> ssl.SSLContext:
        """TLS towards the artifact service: its certificate checked against the farm's CA (not
        its host name, as in Dask), ours presented."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file))
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


# Dask settings that come with TLS: nothing in plaintext, on every comm of the process
REQUIRE_ENCRYPTION_ENV = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


def resolve(role: str, tls_dir: Path | None, insecure: bool) -> FarmTLS | None:
    """The role's TLS from ``--tls DIR``, None for ``--insecure``; one of them is required."""
    if tls_dir is not None and insecure:
        raise ConfigError("--tls and --insecure together: choose one")
    if insecure:
        return None
    if tls_dir is None:
        raise ConfigError(
            f"farm {role}: no credentials; pass --tls DIR (or ${TLS_ENV}) with the farm's "
            "certificates from `harness farm init DIR`, or --insecure to run in plaintext")
    return FarmTLS(Path(tls_dir).expanduser().absolute(), role).check()


def scheduler_url(address: str, tls: FarmTLS | None) -> str:
    """``address`` with the scheme the farm uses: tls:// with credentials, tcp:// without."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        return f"{'tls' if tls else 'tcp'}://{address}"
    if tls and scheme != "tls":
        raise ConfigError(f"--scheduler {address}: the farm runs on TLS; write tls://{rest}")
    if not tls and scheme == "tls":
        raise ConfigError(f"--scheduler {address}: a tls:// scheduler needs --tls DIR")
    return address


def describe(tls: FarmTLS | None) -> str:
    """What a run's meta and summary say about the farm's security."""
    if tls is None:
        return "insecure (plaintext, no credentials: --insecure)"
    return f"tls (mutual, farm CA {tls.ca_fingerprint()})"


# -- making the certificates (harness farm init) ---------------------------------------------

def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _write_cert(path: Path, cert: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(cert.public_bytes(serialization.Encoding.PEM))


def _name(common: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "harness farm"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool,
                 days: int) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                              critical=True))
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), critical=True)
    else:  # every role is a server to some and a client to others (Dask connects both ways)
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def init_farm(folder: Path, name: str = "harness farm", days: int = VALID_DAYS) -> list[Path]:
    """Make the farm's CA and one certificate per role in ``folder``; the files written.

    A folder that already holds a farm's CA is refused (its certificates are in use somewhere).
    """
    try:
        import cryptography  # noqa: F401
    except ImportError as error:
        raise ConfigError("harness farm init needs the cryptography package: "
                          "pip install 'harness[farm]'") from error
    folder = Path(folder).expanduser().absolute()
    if days < 1:
        raise ConfigError(f"--days {days}: a certificate must be valid at least one day")
    if (folder / CA_CERT).exists() or (folder / CA_KEY).exists():
        raise ConfigError(f"{folder} already holds a farm CA ({CA_CERT}); its certificates may be "
                          "in use: choose another folder, or move that one away first")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    except OSError as error:
        raise ConfigError(f"{folder}: cannot make the folder ({error.strerror or error})") \
            from error
    ca_key = _key()
    ca_name = f"{name} CA"
    written = [folder / CA_KEY, folder / CA_CERT]
    _write_key(written[0], ca_key)
    _write_cert(written[1], _certificate(ca_name, ca_key, ca_name, ca_key, True, days))
    for role in ROLES:
        key = _key()
        cert_name, key_name = _files(role)
        _write_key(folder / key_name, key)
        _write_cert(folder / cert_name, _certificate(f"{name} {role}", key, ca_name, ca_key,
                                                      False, days))
        written += [folder / cert_name, folder / key_name]
    return written
