"""Bearer tokens of the HTTP API (`herd creds operator --http`) in the data dir:
``<data-dir>/nats/http_tokens.json`` (mode 0600), under the users' lock. The running
control plane reads them from the KV bucket every replica shares
(``natsd/token_bucket.py``); this file is where they lived before, and where `herd creds`
keeps a token (and, in ``http_tokens.revoked``, a revocation) while no server runs: the
control plane moves both into the bucket at its start.

Only a token's SHA-256 is stored: the token itself (256 random bits) is printed once.
A token names the operator user it acts as (``op-<name>``), so `herd creds revoke
op-<name>` revokes its NATS user and its HTTP tokens together; ``read_only`` tokens may
call the read routes only. The running control plane reads the file again when it
changes (by its modification time), so an issued or revoked token counts at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from herdbook.natsd.users import UsersError, _write_private, operator_user

TOKENS_JSON = "http_tokens.json"
REVOKED_JSON = "http_tokens.revoked"
SERVED_URL = "http_url"
"""The URL the control plane last served the HTTP API on, written once it serves."""
TOKEN_PREFIX = "herd_"


class HttpToken(msgspec.Struct, frozen=True, kw_only=True):
    user: str
    """The operator user it acts as (``op-<name>``)."""
    sha256: str
    read_only: bool = False
    created_at: float = 0.0


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class HttpTokens:
    """The tokens of one data dir's ``nats`` store dir."""

    def __init__(self, store_dir: str | Path) -> None:
        self.dir = Path(store_dir)
        self._cache: tuple[int, list[HttpToken]] | None = None

    @property
    def path(self) -> Path:
        return self.dir / TOKENS_JSON

    def record_url(self, url: str) -> None:
        """Where these tokens open the HTTP API (`herd up`, once it serves)."""
        (self.dir / SERVED_URL).write_text(url + "\n")

    def served_url(self) -> str | None:
        """The URL ``record_url`` last wrote, if any (`herd creds operator --http`)."""
        try:
            return (self.dir / SERVED_URL).read_text().strip() or None
        except OSError:
            return None

    def tokens(self) -> list[HttpToken]:
        try:
            return msgspec.json.decode(self.path.read_bytes(), type=list[HttpToken])
        except FileNotFoundError:
            return []
        except OSError as err:
            raise UsersError(f"{self.path}: {err.strerror}") from err
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise UsersError(f"{self.path}: not a tokens file ({err})") from err

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[HttpToken]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            tokens = self.tokens()
            yield tokens
            _write_private(self.path,
                           msgspec.json.format(msgspec.json.encode(tokens)).decode() + "\n")

    def issue(self, name: str, *, read_only: bool = False) -> tuple[str, HttpToken]:
        """A new token for operator ``name``; the token is returned, only its hash kept."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        entry = HttpToken(user=operator_user(name), sha256=digest(token), read_only=read_only,
                          created_at=time.time())
        with self._locked() as tokens:
            tokens.append(entry)
        return token, entry

    def revoke(self, user: str) -> int:
        """Remove every token of ``user``; how many there were."""
        with self._locked() as tokens:
            kept = [t for t in tokens if t.user != user]
            removed = len(tokens) - len(kept)
            tokens[:] = kept
        return removed

    def revoked_users(self) -> list[str]:
        try:
            return msgspec.json.decode((self.dir / REVOKED_JSON).read_bytes(), type=list[str])
        except FileNotFoundError:
            return []
        except OSError as err:
            raise UsersError(f"{self.dir / REVOKED_JSON}: {err.strerror}") from err
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise UsersError(f"{self.dir / REVOKED_JSON}: not a list of users ({err})") from err

    def revoke_later(self, user: str) -> int:
        """Revoke ``user``'s tokens kept here, and remember to revoke those in the bucket
        at the next start; how many were kept here."""
        removed = self.revoke(user)
        with open(self.dir / "users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            users = [u for u in self.revoked_users() if u != user] + [user]
            _write_private(self.dir / REVOKED_JSON, msgspec.json.encode(users).decode() + "\n")
        return removed

    def pending(self) -> bool:
        """Whether anything waits to move into the bucket."""
        return self.path.exists() or (self.dir / REVOKED_JSON).exists()

    def clear(self) -> None:
        """Once moved into the bucket."""
        for path in (self.path, self.dir / REVOKED_JSON):
            path.unlink(missing_ok=True)

    def _current(self) -> list[HttpToken]:
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            return []
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, self.tokens())
        return self._cache[1]

    def lookup(self, token: str) -> HttpToken | None:
        """The entry of ``token``, comparing its hash with every stored one in constant
        time (no early exit on a match)."""
        wanted = digest(token)
        found = None
        for entry in self._current():
            if hmac.compare_digest(wanted, entry.sha256):
                found = entry
        return found
