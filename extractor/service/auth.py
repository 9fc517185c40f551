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

from extractor.vocab import Role

RANK: dict[Role, int] = {Role.submitter: 0, Role.reviewer: 1, Role.admin: 2}

_bearer = HTTPBearer(auto_error=False, description="a token from `extract tokens create --role ...`")


@dataclass(frozen=True)
class Principal:
    """The caller: the token's name is the identity recorded on reviews; the role bounds what it may do;
    ``owner`` is whose submissions it sees (its own name unless tokens are grouped by ``--owner``)."""

    name: str
    role: Role
    owner: str = ""

    def may(self, role: Role) -> bool:
        return RANK[self.role] >= RANK[role]

    @property
    def scope(self) -> str | None:
        """The owner whose work this caller may read, or None for everyone's (reviewers and admins)."""
        return None if self.may(Role.reviewer) else (self.owner or self.name)


def current_principal(request: Request,
                      credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    """The caller of this request; 401 without a valid, unrevoked bearer token."""
    from extractor.store.tokens import find_token

    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
    found = find_token(request.app.state.service.store.engine, credentials.credentials)
    if found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown or revoked token",
                            headers={"WWW-Authenticate": "Bearer"})
    return Principal(found.name, found.role, found.owner)


def require_role(role: Role) -> Callable[[Principal], Principal]:
    """A dependency giving the caller if its role is at least ``role`` (else 403)."""

    def dependency(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        if not principal.may(role):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"needs role {role} (token {principal.name!r} is {principal.role})")
        return principal

    return dependency
