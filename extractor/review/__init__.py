"""Human review: listing, showing, approving and rejecting candidates; only people write approved records.

- ``resolve``: what DOC means (document run id, sha256 or prefix, path); ambiguity is an error.
- ``queue``: what waits for a person, READY_FOR_REVIEW first.
- ``view``: the data ``extract show`` renders (and prints with ``--format json``).
- ``decide``: approve (as produced or edited, re-validated against the unchanged source) and reject.

Only these modules and the review commands import ``extractor.store.approved``.
"""

from extractor.review.resolve import Resolved, ReviewError, resolve, resolve_run

__all__ = ["Resolved", "ReviewError", "resolve", "resolve_run"]
