"""Who is calling: a bearer token looked up by its hash, and the role it grants.

``current_principal`` and ``require_role(role)`` are FastAPI dependencies any router can use (the review
web pages take them too): no token or an unknown one is 401, a token whose role is too low is 403.
Roles are ordered: submitter < reviewer < admin; each may do what the roles before it may.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from extractor.store.tokens import TokenInfo, find_token, touch
from extractor.vocab import Role

MAX_TOKEN_CHARS = 200
"""Longer than any token ``extract tokens create`` makes: a longer one is not looked up."""
RANK: dict[Role, int] = {Role.submitter: 0, Role.reviewer: 1, Role.admin: 2}

_bearer = HTTPBearer(auto_error=False, description="a token from `extract tokens create --role ...`")


@dataclass(frozen=True)
class Principal:
    """The caller: the token's name is the identity recorded on reviews; the role bounds what it may do;
    ``owner`` is whose work it sees (its own name unless tokens are grouped by ``--owner``), unless
    ``all_owners``."""

    name: str
    role: Role
    owner: str = ""
    all_owners: bool = False

    def may(self, role: Role) -> bool:
        return RANK[self.role] >= RANK[role]

    @property
    def scope(self) -> str | None:
        """The owner whose work this caller may read, or None for every owner's (admins, ``--all-owners``)."""
        return None if self.all_owners or self.role == Role.admin else (self.owner or self.name)

    @classmethod
    def of(cls, token: TokenInfo) -> Principal:
        return cls(token.name, token.role, token.owner, token.all_owners)


def refusal(token: TokenInfo | None) -> str | None:
    """Why ``token`` (None: not found, or revoked) may not be used now, or None when it may."""
    if token is None:
        return "unknown or revoked token"
    if token.expired():
        assert token.expires_at is not None
        return (f"token {token.name!r} expired at {token.expires_at:%Y-%m-%d %H:%M} UTC: ask an admin for a new "
                f"secret (`extract tokens rotate {token.name}`)")
    return None


def current_principal(request: Request,
                      credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    """The caller of this request; 401 without a valid bearer token (unknown, revoked or expired: the detail says
    which)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
    engine = request.app.state.service.store.engine
    found = find_token(engine, credentials.credentials) if len(credentials.credentials) <= MAX_TOKEN_CHARS else None
    why = refusal(found)
    if why is not None or found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, why, headers={"WWW-Authenticate": "Bearer"})
    touch(engine, found)
    return Principal.of(found)


def require_role(role: Role) -> Callable[[Principal], Principal]:
    """A dependency giving the caller if its role is at least ``role`` (else 403)."""

    def dependency(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        if not principal.may(role):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"needs role {role} (token {principal.name!r} is {principal.role})")
        return principal

    return dependency


def require_everyone(principal: Annotated[Principal, Depends(require_role(Role.reviewer))]) -> Principal:
    """A reviewer or admin who reads every owner's work (403 for a reviewer of one owner): for what mixes every
    owner's documents, such as runs (a worker run converts every submitter's) and compare."""
    if principal.scope is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token {principal.name!r} reads only {principal.scope!r}'s "
                            "work; runs and compare mix every owner's documents (an admin, or a reviewer made with "
                            "--all-owners, reads them)")
    return principal
