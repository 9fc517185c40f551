"""API tokens of ``extract serve``: created once (the secret is shown then and never again), stored as SHA-256.

A bearer token is 256 random bits, so a plain SHA-256 is enough to make a stolen copy of the table useless
(no dictionary to try, unlike passwords) and lets a request be checked with one indexed look-up.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from extractor.canonical import text_sha256
from extractor.errors import UsageError
from extractor.store.db import require_one_of, utcnow, write_connection
from extractor.store.tables import api_tokens
from extractor.vocab import Role, values_of

TOKEN_PREFIX = "ext_"


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed: never its secret."""

    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None
    owner: str
    """Whose work the token submits and sees (``--owner``; the token's own name when none was given)."""


def token_hash(token: str) -> str:
    return text_sha256(token)


def create_token(engine: Engine, name: str, role: str, owner: str | None = None) -> str:
    """A new token for ``name`` with ``role``; returns the secret (only its hash is stored). Tokens given the
    same ``owner`` see each other's submissions; without one the token is its own owner."""
    require_one_of(role, values_of(Role), "role")
    if not name.strip() or len(name) > 200:
        raise UsageError("token name must be 1 to 200 characters")
    if owner is not None and (not owner.strip() or len(owner) > 200):
        raise UsageError("token owner must be 1 to 200 characters")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with write_connection(engine) as connection:
            connection.execute(insert(api_tokens).values(name=name, role=role, token_sha256=token_hash(secret),
                                                         created_at=utcnow(), owner=owner))
    except IntegrityError:
        raise UsageError(f"a token named {name!r} exists; revoke it or pick another name") from None
    return secret


def find_token(engine: Engine, secret: str) -> TokenInfo | None:
    """The live (not revoked) token with this secret, if any."""
    return find_token_by_hash(engine, token_hash(secret))


def find_token_by_hash(engine: Engine, sha256: str) -> TokenInfo | None:
    """The live token with this hash: what a browser session (which keeps the hash, not the secret) checks on
    every request, so revoking the token ends its sessions."""
    with engine.connect() as connection:
        row = connection.execute(select(api_tokens).where(api_tokens.c.token_sha256 == sha256,
                                                     api_tokens.c.revoked_at.is_(None))).first()
        return None if row is None else _info(row)


def list_tokens(engine: Engine) -> list[TokenInfo]:
    with engine.connect() as connection:
        return [_info(row) for row in connection.execute(select(api_tokens).order_by(api_tokens.c.created_at))]


def _info(row: Row[Any]) -> TokenInfo:
    return TokenInfo(row.name, Role(row.role), row.created_at, row.revoked_at, row.owner or row.name)


def revoke_token(engine: Engine, name: str) -> bool:
    """Revoke the token called ``name``; False when there is no live token of that name."""
    with write_connection(engine) as connection:
        done = connection.execute(update(api_tokens).where(api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None))
                                  .values(revoked_at=utcnow()))
        return done.rowcount == 1
