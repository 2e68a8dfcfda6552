"""Who is asking the HTTP server: API tokens, an authenticating proxy, and the Host allow-list.

API tokens are random strings shown once by `rag token add`; the tokens file keeps only their
sha256, each with a user name and groups. A token is high-entropy, so one unsalted hash is
enough to make the file useless for signing in, and lookups compare hashes in constant time.
Identity headers (`X-Forwarded-User`, `X-Forwarded-Groups`) count only when the connection
comes from an address in ``[server] trusted_proxies``. Anything else is anonymous: public
docs only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from rag.core.config import ServerSettings
from rag.core.errors import ConfigError
from rag.core.files import atomic_write

log = logging.getLogger("rag.auth")
TOKEN_PREFIX = "rag_"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
GROUP = re.compile(r"[^,\s][^,]{0,127}")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
ANY_ADDRESS = ("", "0.0.0.0", "::")
MAX_GROUPS = 64


class Unauthorized(Exception):
    """Credentials were sent but are not valid: answered with 401, never taken as anonymous."""


@dataclass(frozen=True)
class TokenEntry:
    name: str
    groups: tuple[str, ...]
    sha256: str
    created: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "groups": list(self.groups), "sha256": self.sha256,
                "created": self.created}


@dataclass(frozen=True)
class Identity:
    """The asking user: a name (None = anonymous) and the groups whose docs they may see."""

    user: str | None
    groups: frozenset[str]
    via: str  # token | proxy | anonymous


ANONYMOUS = Identity(None, frozenset(), "anonymous")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_groups(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Sorted distinct groups from `a, b` or a list; a malformed group is an error."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    groups = sorted({p.strip() for p in parts if p.strip()})
    for group in groups:
        if not GROUP.fullmatch(group):
            raise ConfigError(f"group {group!r} is not valid: no commas, at most 128 characters")
    return tuple(groups)


# --- the tokens file --------------------------------------------------------------------


def tokens_path(settings: ServerSettings) -> Path:
    if not settings.tokens_file:
        raise ConfigError("no tokens file: set [server] tokens_file in the config "
                          "(or RAG_SERVER__TOKENS_FILE)")
    return Path(settings.tokens_file).expanduser()


def read_tokens(path: Path) -> list[TokenEntry]:
    """Entries of the tokens file; a missing file has none, a damaged one is a ConfigError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = [TokenEntry(str(e["name"]), tuple(str(g) for g in e["groups"]),
                              str(e["sha256"]), str(e.get("created", "")))
                   for e in data["tokens"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"tokens file {path}: cannot read it ({exc})") from None
    if any(not re.fullmatch(r"[0-9a-f]{64}", e.sha256) for e in entries):
        raise ConfigError(f"tokens file {path}: an entry has no valid sha256")
    return entries


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time: two `rag token add` runs must not lose each other's entry."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_tokens(path: Path, entries: list[TokenEntry]) -> None:
    """Replace the file atomically; it is created 0600 and never exists half-written."""
    text = json.dumps({"version": 1, "tokens": [e.to_dict() for e in entries]}, indent=2)
    atomic_write(path, text + "\n", mode=0o600)


def add_token(path: Path, name: str, groups: tuple[str, ...]) -> str:
    """Create a token for a new user name and return it; only its hash is stored."""
    if not NAME.fullmatch(name):
        raise ConfigError(f"user name {name!r} is not valid: letters, digits and ._@- "
                          "(at most 64 characters)")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with _locked(path):
        entries = read_tokens(path)
        if any(e.name == name for e in entries):
            raise ConfigError(f"{name} already has a token; `rag token remove {name}` first")
        created = datetime.now(UTC).isoformat(timespec="seconds")
        _write_tokens(path, [*entries, TokenEntry(name, groups, token_hash(token), created)])
    return token


def remove_token(path: Path, name: str) -> None:
    with _locked(path):
        entries = read_tokens(path)
        kept = [e for e in entries if e.name != name]
        if len(kept) == len(entries):
            raise ConfigError(f"no token named {name} in {path}")
        _write_tokens(path, kept)


class TokenStore:
    """The tokens file as the server sees it, re-read when it changes on disk."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._entries: list[TokenEntry] = []
        if path is not None:
            self._entries = read_tokens(path)  # a damaged file stops the server from starting
            self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def entries(self) -> list[TokenEntry]:
        if self.path is None:
            return []
        stamp = self._stat()
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._entries = read_tokens(self.path)
                except ConfigError as exc:  # fail closed: no token works until it is fixed
                    log.error("%s; refusing every token until it is fixed", exc)
                    self._entries = []
                self._stamp = stamp
            return self._entries

    def find(self, token: str) -> TokenEntry | None:
        digest = token_hash(token)
        found = None
        for entry in self.entries():  # every entry compared: the time says nothing
            if hmac.compare_digest(entry.sha256, digest):
                found = entry
        return found


# --- who is asking ------------------------------------------------------------------------


class Authenticator:
    """Turns a request's headers and peer address into an Identity, or raises Unauthorized."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.tokens = TokenStore(tokens_path(settings) if settings.tokens_file else None)
        self.proxies = [ipaddress.ip_network(p, strict=False) for p in settings.trusted_proxies]

    @property
    def accepts_tokens(self) -> bool:
        return self.tokens.path is not None

    def trusted(self, peer: str | None) -> bool:
        try:
            address = ipaddress.ip_address(peer or "")
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    def identify(self, headers: Mapping[str, str], peer: str | None) -> Identity:
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthorized("the Authorization header must be `Bearer <token>`")
            if not self.accepts_tokens:
                raise Unauthorized("this server accepts no API tokens")
            entry = self.tokens.find(token.strip())
            if entry is None:
                raise Unauthorized("unknown or revoked API token")
            return Identity(entry.name, frozenset(entry.groups), "token")
        user = headers.get(self.settings.user_header, "").strip()
        if user:
            if not self.trusted(peer):
                raise Unauthorized(f"{self.settings.user_header} is only accepted from the "
                                   "addresses in [server] trusted_proxies")
            raw = headers.get(self.settings.groups_header, "")
            groups = {g.strip() for g in raw.split(",") if g.strip()}
            return Identity(user, frozenset(sorted(groups)[:MAX_GROUPS]), "proxy")
        return ANONYMOUS


# --- the Host allow-list (DNS rebinding) --------------------------------------------------


def _split_host(value: str) -> tuple[str, int | None] | None:
    """`name`, `name:port`, `[v6]` or `[v6]:port` as (host, port); None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[:end + 1], value[end + 1:]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else ""
    else:
        host, sep, port_text = value.partition(":")
        if sep and not port_text:
            return None
    if not host or (port_text and not port_text.isdigit()):
        return None
    return host, int(port_text) if port_text else None


class HostCheck:
    """Which Host headers are served: a page on a rebound DNS name sends its own name."""

    def __init__(self, allowed: list[str], port: int | None = None,
                 listen_host: str | None = None) -> None:
        self.any = "*" in allowed
        names = [a for a in allowed if a != "*"]
        if not allowed:
            names = [f"{h}:{port}" if port else h for h in LOOPBACK_HOSTS]
            if listen_host and listen_host not in (*ANY_ADDRESS, "::1", *LOOPBACK_HOSTS):
                shown = f"[{listen_host}]" if ":" in listen_host else listen_host
                names.append(f"{shown}:{port}" if port else shown)
        self.entries = []
        for name in names:
            parsed = _split_host(name)
            if parsed is None:
                raise ConfigError(f"[server] allowed_hosts: {name!r} is not host or host:port")
            self.entries.append(parsed)

    def allows(self, value: str | None) -> bool:
        if self.any:
            return True
        parsed = _split_host(value or "")
        if parsed is None:
            return False
        host, port = parsed
        port = port or 80  # a Host without a port names the HTTP default
        return any(host == h and (p is None or port == p) for h, p in self.entries)

    def allows_origin(self, origin: str) -> bool:
        """A POST's Origin must name a served host (a browser sends `null` from a sandbox)."""
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and self.allows(parts.netloc)
