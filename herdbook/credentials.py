"""How a herd client (agent, CLI, control plane on ``--nats-url``) authenticates to NATS:
user and password (given, from a creds file written by `herd creds`, or in the URL as
``nats://user:pass@host:4222``) and TLS (``--tls-ca``, ``--tls-cert``, ``--tls-key``).

A bad file is a ``CredentialsError`` with one line naming it and the reason.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec


class CredentialsError(ValueError):
    pass


class CredsFile(msgspec.Struct, frozen=True, kw_only=True):
    """What `herd creds` writes: enough for an agent or the CLI to connect."""

    user: str
    password: str
    url: str | None = None
    """The server the credentials were issued for (without the password)."""
    kind: str = ""
    node_id: str | None = None


def read_creds(path: str | Path) -> CredsFile:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise CredentialsError(f"creds file {path}: {err.strerror}") from err
    try:
        return msgspec.json.decode(raw, type=CredsFile)
    except msgspec.DecodeError as err:
        raise CredentialsError(f"creds file {path}: not a herd creds file ({err})") from err


def write_creds(path: str | Path, creds: CredsFile) -> None:
    """Readable by the owner only (0600)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(msgspec.json.format(msgspec.json.encode(creds)) + b"\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, target)


def tls_context(ca: str | None = None, cert: str | None = None,
                key: str | None = None) -> ssl.SSLContext | None:
    """A client context that verifies the server against ``ca`` (the system's CAs when
    unset) and presents ``cert``/``key`` when given; None when no TLS option is set."""
    if not (ca or cert or key):
        return None
    if key and not cert:
        raise CredentialsError("--tls-key needs --tls-cert")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    except (OSError, ssl.SSLError) as err:
        raise CredentialsError(f"TLS CA file {ca}: {_reason(err)}") from err
    if cert:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as err:
            raise CredentialsError(f"TLS certificate {cert}"
                                   + (f" / key {key}" if key else "")
                                   + f": {_reason(err)}") from err
    return context


def _reason(err: OSError) -> str:
    if isinstance(err, ssl.SSLError) and err.reason:
        return str(err.reason).lower().replace("_", " ")
    if isinstance(err, ssl.SSLError) and "PEM lib" in str(err):
        return "not a PEM file"
    return err.strerror or str(err)


def url_user(servers: str) -> str | None:
    """The user named in the first ``user:pass@`` of a server URL (list), if any."""
    for part in servers.split(","):
        try:
            name = urlsplit(part.strip()).username
        except ValueError:
            continue
        if name:
            return unquote(name)
    return None


def redact(servers: str) -> str:
    """The URL (list) without passwords, for messages and logs."""
    out = []
    for part in servers.split(","):
        parsed = urlsplit(part.strip())
        if parsed.password is not None:
            host = parsed.netloc.rsplit("@", 1)[1]
            part = parsed._replace(netloc=f"{parsed.username}:***@{host}").geturl()
        out.append(part.strip())
    return ",".join(out)


@dataclass(frozen=True)
class NatsAuth:
    """The authentication options of one client, as given on its command line or config."""

    user: str | None = None
    password: str | None = None
    creds: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def resolve(self, server: str | None) -> tuple[str | None, dict[str, Any]]:
        """(the server to connect to, the keyword arguments for ``nats.connect``).

        User and password: the explicit ones, else the creds file's, else whatever the
        URL carries (nats-py reads it). The server: the given one, else the creds file's.
        With a known user, reply inboxes are ``_INBOX.<user>.*`` (an agent may read its
        own only)."""
        kwargs: dict[str, Any] = {}
        user, password = self.user, self.password
        if self.creds:
            creds = read_creds(self.creds)
            user = user or creds.user
            password = password or creds.password
            server = server or creds.url
        if user is not None and password is None:
            raise CredentialsError("--user needs --password (or a creds file)")
        if password is not None and user is None:
            raise CredentialsError("--password needs --user")
        if user is not None:
            kwargs["user"] = user
            kwargs["password"] = password
        name = user or (url_user(server) if server else None)
        if name:
            kwargs["inbox_prefix"] = f"_INBOX.{name}"
        context = tls_context(self.tls_ca, self.tls_cert, self.tls_key)
        if context is not None:
            kwargs["tls"] = context
        return server, kwargs
