"""``extract serve``: the HTTP API over the run log (FastAPI).

- ``auth``: bearer tokens (stored hashed, ``extractor.store.tokens``) -> ``Principal``; ``require_role``.
- ``app``: ``create_app(...)``, the routes: submit documents, read their state, candidate and findings,
  the review actions, runs and compare.
- ``browser``: the review web pages (``extractor.web``) under ``/review``, for people who sign in by pasting
  their token once (a session cookie, since a browser sends no bearer header).
"""

from extractor.service.auth import Principal, current_principal, require_role

__all__ = ["Principal", "current_principal", "require_role"]
