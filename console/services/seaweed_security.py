"""SeaweedFS behind its S3 gateway: the internal APIs answer only its own parts and admin tools.

`weed server` runs a master, a volume server, a filer and the S3 gateway, each with an HTTP and a
gRPC port on loopback. Unconfigured, none of them asks who is calling: any process on the
machine — a job — read, wrote and deleted every bucket through the filer's HTTP API
(`GET /buckets/<bucket>/<key>`), deleted a bucket's volumes through the master's
(`/col/delete?collection=<bucket>`), and could rewrite the S3 identities through the filer's
gRPC, whatever the S3 identities allowed. Configured here (security.toml in a directory only
the server's user reads, `weed -config_dir`), checked by console/tests/test_objectstore_security.py:

- every gRPC port (master, volume, filer, S3) takes only mutual TLS with a certificate of a CA
  made at each start, whose key is never written down;
- the HTTP ports of the master, the volume server and the filer take only HTTPS with such a
  client certificate (`[https.*]`, and `[https.client]` for the parts calling each other);
- behind that, writes and reads on the volume server need a JWT the master signs for the file
  (`jwt.signing`, `jwt.signing.read`), and on the filer one the S3 gateway signs
  (`jwt.filer_signing`, `jwt.filer_signing.read`; that key also guards the filer's IAM gRPC).

The S3 port stays plain HTTP with S3 signatures and the identities' policies: the one way in.
An admin tool given the same directory (`ObjectStore.weed_command`) holds the certificate.
Still reachable by anyone local: the S3 port, TCP handshakes on the other ports (refused at
TLS), and SeaweedFS's Unix sockets in /tmp (`seaweedfs-*.sock`: owned by the server's user,
mode 0755, so another Unix user cannot connect; behind them the same TLS and JWT checks).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# gRPC servers of `weed server` that take mutual TLS (and the HTTP servers that take HTTPS)
GRPC_PARTS = ("master", "volume", "filer", "s3")
HTTPS_PARTS = ("master", "volume", "filer")
CERT_DAYS = 3650  # made anew at every start: only a store that runs for ten years outlives it


@dataclass(frozen=True)
class SeaweedSecurity:
    config_dir: Path  # security.toml, the CA's certificate, the parts' certificate and key

    @property
    def global_args(self) -> list[str]:
        """`weed` flags that come before the subcommand (`weed -config_dir=… server …`)."""
        return [f"-config_dir={self.config_dir}"]

    @property
    def ca(self) -> Path:
        return self.config_dir / "ca.crt"

    @property
    def cert(self) -> Path:
        return self.config_dir / "weed.crt"

    @property
    def key(self) -> Path:
        return self.config_dir / "weed.key"


def secure_seaweedfs(config_dir: Path) -> SeaweedSecurity:
    """Write a fresh security configuration into `config_dir` (mode 0700; the keys 0600)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    config_dir.chmod(0o700)
    security = SeaweedSecurity(config_dir)
    ca_cert, cert, key = _certificates()
    _write(security.ca, ca_cert)
    _write(security.cert, cert)
    _write(security.key, key)
    _write(config_dir / "security.toml", _toml(security).encode())
    return security


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)


def _certificates() -> tuple[bytes, bytes, bytes]:
    """A CA (its key dropped once it signed) and one certificate for every part, as server and
    as client (SeaweedFS checks no host name; HTTPS clients check 127.0.0.1 and localhost)."""
    now = datetime.datetime.now(datetime.UTC)
    valid = {"not_valid_before": now - datetime.timedelta(minutes=5), "not_valid_after": now + datetime.timedelta(days=CERT_DAYS)}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "simpleai object storage CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(valid["not_valid_before"])
        .not_valid_after(valid["not_valid_after"])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "seaweedfs")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), leaf.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _toml(security: SeaweedSecurity) -> str:
    def q(value: object) -> str:  # a TOML basic string (JSON's escapes are TOML's)
        return json.dumps(str(value))

    pair = f"cert = {q(security.cert)}\nkey = {q(security.key)}\n"
    lines = [
        "# written by console.services.seaweed_security at every start of the store",
        *(f"[jwt.{name}]\nkey = {q(secrets.token_urlsafe(32))}\nexpires_after_seconds = 10\n"
          for name in ("signing", "signing.read", "filer_signing", "filer_signing.read")),
        f"[grpc]\nca = {q(security.ca)}\n",
        *(f"[grpc.{part}]\n{pair}" for part in GRPC_PARTS),
        f"[grpc.client]\n{pair}",
        *(f"[https.{part}]\n{pair}ca = {q(security.ca)}\n" for part in HTTPS_PARTS),
        f"[https.client]\nenabled = true\n{pair}ca = {q(security.ca)}\n",
    ]
    return "\n".join(lines)
