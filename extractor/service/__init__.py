"""``extract serve``: the HTTP API over the run log (FastAPI).

- ``auth``: bearer tokens (stored hashed, ``extractor.store.tokens``) -> ``Principal``; ``require_role``.
- ``app``: ``create_app(...)``, the routes: submit documents, read their state, candidate and findings,
  the review actions, runs and compare.

Other routers (the review web pages) mount into the same app and take the same principal dependency.
"""

from extractor.service.auth import Principal, current_principal, require_role

__all__ = ["Principal", "current_principal", "require_role"]
