"""API tokens of ``extract serve``: created once (the secret is shown then and never again), stored as SHA-256.

A bearer token is 256 random bits, so a plain SHA-256 is enough to make a stolen copy of the table useless
(no dictionary to try, unlike passwords) and lets a request be checked with one indexed look-up.

Every token belongs to an owner (``--owner TEAM``, else its own name) whose work it reads, or is explicitly
department-wide: a reviewer made with ``--all-owners`` reads and decides every owner's work, as every admin does.
A reviewer must be given one or the other (a reviewer of its own submissions alone reviews nothing). Tokens expire
(``DEFAULT_TOKEN_DAYS`` unless told otherwise; ``rotate`` gives a new secret and a new expiry under the same
name), and the last time each was used is kept to the minute, so a request writes the table at most once a
minute per token.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Row, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from extractor.canonical import text_sha256
from extractor.errors import UsageError
from extractor.store.db import require_one_of, utcnow, write_connection
from extractor.store.tables import api_tokens
from extractor.vocab import DEFAULT_TOKEN_DAYS, Role, values_of

TOKEN_PREFIX = "ext_"
DEFAULT_LIFETIME = timedelta(days=DEFAULT_TOKEN_DAYS)
USED_EVERY_S = 60
"""``last_used_at`` is written when it is older than this (so a busy token costs one write a minute, not one a
request)."""


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed: never its secret."""

    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None
    owner: str
    """Whose work the token submits and sees (``--owner``; the token's own name when none was given)."""
    all_owners: bool = False
    """It reads and decides every owner's work (an admin, or a reviewer made with ``--all-owners``)."""
    expires_at: datetime | None = None
    """None: it never expires (``--expires never``)."""
    last_used_at: datetime | None = None
    token_sha256: str = ""

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or utcnow())

    def status(self, now: datetime | None = None) -> str:
        """live, expired or revoked."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expired(now) else "live"

    def to_json(self) -> dict[str, Any]:
        def at(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat(timespec="seconds")

        return {"name": self.name, "role": self.role, "owner": self.owner, "all_owners": self.all_owners,
                "status": self.status(), "created_at": at(self.created_at), "last_used_at": at(self.last_used_at),
                "expires_at": at(self.expires_at), "revoked_at": at(self.revoked_at)}


def token_hash(token: str) -> str:
    return text_sha256(token)


def create_token(engine: Engine, name: str, role: str, owner: str | None = None, *, all_owners: bool = False,
                 expires_in: timedelta | None = DEFAULT_LIFETIME) -> str:
    """A new token for ``name`` with ``role``; returns the secret (only its hash is stored). Tokens given the
    same ``owner`` see each other's work; a submitter without one is its own owner; a reviewer needs an owner or
    ``all_owners``; an admin sees every owner's work whatever it is given. ``expires_in`` None: never expires."""
    require_one_of(role, values_of(Role), "role")
    if not name.strip() or len(name) > 200:
        raise UsageError("token name must be 1 to 200 characters")
    if owner is not None and (not owner.strip() or len(owner) > 200):
        raise UsageError("token owner must be 1 to 200 characters")
    _check_scope(role, owner, all_owners)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    try:
        with write_connection(engine) as connection:
            connection.execute(insert(api_tokens).values(
                name=name, role=role, token_sha256=token_hash(secret), created_at=now, owner=owner,
                all_owners=all_owners or role == Role.admin, expires_at=_expiry(now, expires_in)))
    except IntegrityError:
        raise UsageError(f"a token named {name!r} exists; rotate it (`extract tokens rotate {name}`), revoke it, "
                         "or pick another name") from None
    return secret


def _check_scope(role: str, owner: str | None, all_owners: bool) -> None:
    if all_owners and owner is not None:
        raise UsageError("give --owner TEAM or --all-owners, not both")
    if all_owners and role == Role.submitter:
        raise UsageError("a submitter reads only its owner's work: --all-owners is for reviewers")
    if role == Role.reviewer and owner is None and not all_owners:
        raise UsageError("a reviewer token needs --owner TEAM (it reads and decides that owner's work) or "
                         "--all-owners (every owner's)")


def _expiry(now: datetime, expires_in: timedelta | None) -> datetime | None:
    if expires_in is None:
        return None
    if expires_in <= timedelta(0):
        raise UsageError("a token's lifetime must be positive (or never)")
    return now + expires_in


def find_token(engine: Engine, secret: str) -> TokenInfo | None:
    """The unrevoked token with this secret, if any (an expired one too: ``TokenInfo.expired`` says so, and the
    caller refuses it saying why)."""
    return find_token_by_hash(engine, token_hash(secret))


def find_token_by_hash(engine: Engine, sha256: str) -> TokenInfo | None:
    """The unrevoked token with this hash: what a browser session (which keeps the hash, not the secret) checks on
    every request, so revoking the token ends its sessions."""
    with engine.connect() as connection:
        row = connection.execute(select(api_tokens).where(api_tokens.c.token_sha256 == sha256,
                                                          api_tokens.c.revoked_at.is_(None))).first()
        return None if row is None else _info(row)


def touch(engine: Engine, token: TokenInfo) -> None:
    """Record that ``token`` was used now, unless that was recorded less than ``USED_EVERY_S`` ago."""
    now = utcnow()
    if token.last_used_at is not None and now - token.last_used_at < timedelta(seconds=USED_EVERY_S):
        return
    before = now - timedelta(seconds=USED_EVERY_S)
    with write_connection(engine) as connection:
        connection.execute(update(api_tokens).where(
            api_tokens.c.token_sha256 == token.token_sha256,
            or_(api_tokens.c.last_used_at.is_(None), api_tokens.c.last_used_at < before)).values(last_used_at=now))


def list_tokens(engine: Engine) -> list[TokenInfo]:
    with engine.connect() as connection:
        return [_info(row) for row in connection.execute(select(api_tokens).order_by(api_tokens.c.created_at))]


def _info(row: Row[Any]) -> TokenInfo:
    return TokenInfo(row.name, Role(row.role), row.created_at, row.revoked_at, row.owner or row.name,
                     bool(row.all_owners) or row.role == Role.admin, row.expires_at, row.last_used_at,
                     row.token_sha256)


def revoke_token(engine: Engine, name: str) -> bool:
    """Revoke the token called ``name``; False when there is no live token of that name."""
    with write_connection(engine) as connection:
        done = connection.execute(update(api_tokens).where(api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None))
                                  .values(revoked_at=utcnow()))
        return done.rowcount == 1


def rotate_token(engine: Engine, name: str, expires_in: timedelta | None = DEFAULT_LIFETIME) -> str:
    """A new secret for the unrevoked token ``name`` (expired or not), with a new expiry; the old secret stops
    working at once (and with it the browser sessions started with it). Role and owner stay."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    with write_connection(engine) as connection:
        done = connection.execute(update(api_tokens).where(api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None))
                                  .values(token_sha256=token_hash(secret), expires_at=_expiry(now, expires_in),
                                          last_used_at=None))
        if done.rowcount != 1:
            raise UsageError(f"no live token named {name!r} (a revoked token is not rotated: create a new one)")
    return secret
