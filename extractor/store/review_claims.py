"""Who has a document open to review it (``review_claims``): a claim holds it for one person for a few minutes.

Opening a document to review it claims it (``claim``); the open page renews the claim while it stays open, and
deciding or leaving releases it. While another person's claim is live nobody else decides the document
(``extractor.store.approved`` checks it in the decision's own transaction): they see who has it and since when.
A claim past its expiry is no claim, so a closed laptop holds nothing for long.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from extractor.store.db import utcnow, write_connection
from extractor.store.tables import document_runs, review_claims


@dataclass(frozen=True)
class ReviewClaim:
    """One person's hold on a document run until ``expires_at``."""

    document_run_id: int
    reviewer: str
    claimed_at: datetime
    expires_at: datetime

    def describe(self) -> str:
        return (f"{self.reviewer} has it open since {self.claimed_at:%Y-%m-%d %H:%M:%S} UTC "
                f"(held until {self.expires_at:%H:%M:%S} UTC unless renewed)")

    def to_json(self) -> dict[str, Any]:
        return {"reviewer": self.reviewer, "since": self.claimed_at.isoformat(timespec="seconds"),
                "until": self.expires_at.isoformat(timespec="seconds"), "token": self.expires_at.isoformat()}


def _claim(row: Any) -> ReviewClaim:
    return ReviewClaim(row.document_run_id, row.reviewer, row.claimed_at, row.expires_at)


def claim(engine: Engine, document_run_id: int, reviewer: str, seconds: float) -> ReviewClaim | None:
    """Claim (or renew) the document run for ``reviewer`` for ``seconds``; returns the live claim afterwards:
    ``reviewer``'s own, or another person's that holds it (nothing changed then). None: no such document run."""
    for _ in range(2):  # two first claims at once: one inserts, the other reads it on its second try
        try:
            with write_connection(engine) as connection:
                return _claim_once(connection, document_run_id, reviewer, seconds)
        except IntegrityError:
            continue
    raise RuntimeError(f"document run {document_run_id} could not be claimed: claimed concurrently twice")


def _claim_once(connection: Connection, document_run_id: int, reviewer: str, seconds: float) -> ReviewClaim | None:
    now = utcnow()
    until = now + timedelta(seconds=seconds)
    if connection.execute(select(document_runs.c.id).where(document_runs.c.id == document_run_id)).first() is None:
        return None
    row = connection.execute(select(review_claims).where(review_claims.c.document_run_id == document_run_id)
                             .with_for_update()).first()
    if row is None:
        connection.execute(insert(review_claims).values(document_run_id=document_run_id, reviewer=reviewer,
                                                        claimed_at=now, expires_at=until))
        return ReviewClaim(document_run_id, reviewer, now, until)
    if row.reviewer != reviewer and row.expires_at > now:
        return _claim(row)
    since = row.claimed_at if row.reviewer == reviewer and row.expires_at > now else now
    connection.execute(update(review_claims).where(review_claims.c.document_run_id == document_run_id)
                       .values(reviewer=reviewer, claimed_at=since, expires_at=until))
    return ReviewClaim(document_run_id, reviewer, since, until)


def release(engine: Engine, document_run_id: int, reviewer: str, until: datetime | None = None) -> bool:
    """End ``reviewer``'s claim on the document run (leaving the page); False when it held none. ``until``: only the
    claim as the leaving page last renewed it, so a page left for another page of the same document (its edit
    form, which claimed it again on opening) does not release what the new page holds."""
    condition = (review_claims.c.document_run_id == document_run_id) & (review_claims.c.reviewer == reviewer)
    if until is not None:
        condition = condition & (review_claims.c.expires_at == until)
    with write_connection(engine) as connection:
        return connection.execute(delete(review_claims).where(condition)).rowcount == 1


def held_by_another(connection: Connection, document_run_id: int, reviewer: str) -> ReviewClaim | None:
    """Another person's live claim on the document run, read in the caller's (decision's) transaction."""
    row = connection.execute(select(review_claims).where(review_claims.c.document_run_id == document_run_id,
                                                         review_claims.c.reviewer != reviewer,
                                                         review_claims.c.expires_at > utcnow())).first()
    return None if row is None else _claim(row)


def end_claim(connection: Connection, document_run_id: int) -> None:
    """A decision releases the document run's claim (the decider's: another's live one refused it)."""
    connection.execute(delete(review_claims).where(review_claims.c.document_run_id == document_run_id))


def live_claims(engine: Engine, document_run_ids: Iterable[int]) -> dict[int, ReviewClaim]:
    """The live claims on these document runs (for the queue and the document page)."""
    wanted = sorted(set(document_run_ids))
    found: dict[int, ReviewClaim] = {}
    now = utcnow()
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = select(review_claims).where(review_claims.c.document_run_id.in_(wanted[start : start + 500]),
                                                review_claims.c.expires_at > now)
            found.update((row.document_run_id, _claim(row)) for row in connection.execute(query))
    return found
