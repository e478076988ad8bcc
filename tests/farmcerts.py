"""Farm certificates as harness made them before they carried a role (for the role tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pre_role_certificate(folder: Path, role: str) -> None:
    """Replace ROLE.pem in a farm's folder with one as harness made it before certificates
    carried their role: same CA, same key and subject, no ``harness-role:`` URI."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    ca_key: Any = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    key: Any = serialization.load_pem_private_key((folder / f"{role}.key").read_bytes(), None)
    old = x509.load_pem_x509_certificate((folder / f"{role}.pem").read_bytes())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    (folder / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
