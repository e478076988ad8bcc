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

Each certificate carries its role, as the URI ``harness-role:<role>`` in its subjectAltName. The
scheduler enforces it (``harness.farm.roles``): a client (the driver) needs the driver's
certificate, a worker registration the agent's; so do the workers (data transfer to a peer's
agent certificate, everything else to the scheduler's only) and the artifact service (the
agent's only). Every command checks its own certificate's role
when it starts (``FarmTLS.check``), so a misplaced file is one line there, not a refusal later.
Certificates from before roles carry none and are refused: ``harness farm init DIR --reissue``
re-issues the role certificates from the same CA (hosts keep ``ca.pem`` and their keys).

Plaintext needs ``--insecure`` on every command, and a run says which it was in its meta.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

ROLES = ("scheduler", "agent", "driver")
CA_CERT = "ca.pem"
CA_KEY = "ca.key"
TLS_ENV = "HARNESS_FARM_TLS"  # the folder of the farm's certificates (for --tls)
VALID_DAYS = 825
ROLE_URI = "harness-role:"  # subjectAltName URI harness-role:<role> in each role's certificate
REISSUE = "harness farm init DIR --reissue"


def role_uri(role: str) -> str:
    return f"{ROLE_URI}{role}"


def roles_in(uris: list[str] | tuple[str, ...]) -> str | None:
    """The one farm role among a certificate's subjectAltName URIs; None when there is none, an
    unknown one or more than one."""
    roles = {uri[len(ROLE_URI):] for uri in uris if uri.startswith(ROLE_URI)}
    return roles.pop() if len(roles) == 1 and roles <= set(ROLES) else None


def peer_role(peercert: Mapping[str, Any] | None) -> str | None:
    """The farm role of a peer's certificate as ``ssl.SSLSocket.getpeercert()`` decodes it."""
    names = (peercert or {}).get("subjectAltName", ())
    return roles_in(tuple(str(value) for kind, value in names if kind == "URI"))


def peer_name(peercert: Mapping[str, Any] | None) -> str:
    """The commonName of a peer's certificate (for log lines), '?' without one."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return "?"


def certificate_role(path: Path) -> str | None:
    """The farm role in a PEM certificate file (needs ``cryptography``, the farm extra)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as error:
        raise ConfigError(f"{path}: not a PEM certificate ({error})") from error
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return roles_in(tuple(names.get_values_for_type(x509.UniformResourceIdentifier)))


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
        """Self, or a ConfigError naming the first file missing or a certificate of another
        role (or of none: made before roles). Without ``cryptography`` the role is left to the
        scheduler to check."""
        for path in (self.ca_file, self.cert_file, self.key_file):
            if not path.is_file():
                raise ConfigError(
                    f"--tls {self.folder}: {path.name} is missing; make the farm's certificates "
                    f"with `harness farm init DIR` and copy {CA_CERT}, {self.cert_file.name} and "
                    f"{self.key_file.name} to this host")
        try:
            import cryptography  # noqa: F401
        except ImportError:
            return self
        role = certificate_role(self.cert_file)
        if role is None:
            raise ConfigError(
                f"--tls {self.folder}: {self.cert_file.name} carries no farm role (made before "
                f"harness put roles in certificates); run `{REISSUE}` where {CA_KEY} is and "
                f"copy each host its role's .pem again")
        if role != self.role:
            raise ConfigError(
                f"--tls {self.folder}: {self.cert_file.name} is the farm's {role} certificate, "
                f"not the {self.role}'s; copy {self.cert_file.name} and {self.key_file.name} "
                "from the folder of `harness farm init`")
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

def _need_cryptography(command: str) -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"{command} needs the cryptography package: "
                          "pip install 'harness[farm]'") from error


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


def _write_cert(path: Path, cert: Any, replace: bool = False) -> None:
    """Write a certificate; ``replace`` swaps it in for an existing one atomically."""
    from cryptography.hazmat.primitives import serialization

    target = path.with_name(f".{path.name}.part") if replace else path
    if replace:
        target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(cert.public_bytes(serialization.Encoding.PEM))
    if replace:
        os.replace(target, path)


def _name(common: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "harness farm"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: Any, key: Any, issuer: Any, issuer_key: Any, role: str | None,
                 not_after: dt.datetime) -> Any:
    """A certificate for ``key``: the farm's CA (``role`` None) or one role's, with its role."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.UTC)
    ca = role is None
    builder = (x509.CertificateBuilder()
               .subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                              critical=True))
    if role is None:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), critical=True)
    else:  # every role is a server to some and a client to others (Dask connects both ways)
        builder = (builder
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
                   .add_extension(x509.SubjectAlternativeName(
                       [x509.UniformResourceIdentifier(role_uri(role))]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def init_farm(folder: Path, name: str = "harness farm", days: int = VALID_DAYS) -> list[Path]:
    """Make the farm's CA and one certificate per role in ``folder``; the files written.

    A folder that already holds a farm's CA is refused (its certificates are in use somewhere).
    """
    _need_cryptography("harness farm init")
    folder = Path(folder).expanduser().absolute()
    if days < 1:
        raise ConfigError(f"--days {days}: a certificate must be valid at least one day")
    if (folder / CA_CERT).exists() or (folder / CA_KEY).exists():
        raise ConfigError(f"{folder} already holds a farm CA ({CA_CERT}); its certificates may be "
                          "in use: choose another folder, move that one away first, or "
                          "re-issue its role certificates with --reissue")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    except OSError as error:
        raise ConfigError(f"{folder}: cannot make the folder ({error.strerror or error})") \
            from error
    ca_key = _key()
    ca_name = _name(f"{name} CA")
    not_after = dt.datetime.now(dt.UTC) + dt.timedelta(days=days)
    written = [folder / CA_KEY, folder / CA_CERT]
    _write_key(written[0], ca_key)
    _write_cert(written[1], _certificate(ca_name, ca_key, ca_name, ca_key, None, not_after))
    for role in ROLES:
        key = _key()
        cert_name, key_name = _files(role)
        _write_key(folder / key_name, key)
        _write_cert(folder / cert_name, _certificate(_name(f"{name} {role}"), key, ca_name,
                                                      ca_key, role, not_after))
        written += [folder / cert_name, folder / key_name]
    return written


def _load_ca(folder: Path) -> tuple[Any, Any]:
    """The farm's CA certificate and key in ``folder``, checked to belong together."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_file, key_file = folder / CA_CERT, folder / CA_KEY
    if not cert_file.is_file() or not key_file.is_file():
        raise ConfigError(f"{folder} holds no farm CA ({CA_CERT} and {CA_KEY}); --reissue runs "
                          f"where `harness farm init` made the farm (ca.key never leaves it)")
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{folder}: cannot read the farm CA ({error})") from error
    raw = (serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*raw) != key.public_key().public_bytes(*raw):
        raise ConfigError(f"{folder}: {CA_KEY} is not the key of {CA_CERT}")
    return cert, key


def reissue_farm(folder: Path, days: int = VALID_DAYS) -> list[Path]:
    """New role certificates from the farm's CA in ``folder`` (same CA, same keys): for
    certificates made before roles, or about to expire; the files written.

    Hosts keep ``ca.pem`` and their keys and need only their role's new ``.pem``. A role whose
    key is missing gets a new one. No certificate outlives the CA.
    """
    _need_cryptography("harness farm init --reissue")
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    folder = Path(folder).expanduser().absolute()
    if days < 1:
        raise ConfigError(f"--days {days}: a certificate must be valid at least one day")
    ca, ca_key = _load_ca(folder)
    common = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    name = str(common[0].value).removesuffix(" CA") if common else "harness farm"
    ca_end = getattr(ca, "not_valid_after_utc", None) or \
        ca.not_valid_after.replace(tzinfo=dt.UTC)
    not_after = min(dt.datetime.now(dt.UTC) + dt.timedelta(days=days), ca_end)
    written: list[Path] = []
    for role in ROLES:
        cert_name, key_name = _files(role)
        key_file = folder / key_name
        if key_file.is_file():
            try:
                key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
            except (ValueError, TypeError) as error:
                raise ConfigError(f"{key_file}: cannot read the key ({error})") from error
        else:
            key = _key()
            _write_key(key_file, key)
            written.append(key_file)
        _write_cert(folder / cert_name, _certificate(_name(f"{name} {role}"), key, ca.subject,
                                                      ca_key, role, not_after), replace=True)
        written.append(folder / cert_name)
    return written
