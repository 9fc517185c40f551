"""Selecting runs from the run log: ``key=value`` filters and dates as people type them.

Used by ``extract runs``, ``stats``, ``export --since`` and both sides of ``extract compare``. Parsing
errors are ``ValueError`` with a message that can be printed as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from extractor.errors import UsageError
from extractor.vocab import MIN_ID_PREFIX

if TYPE_CHECKING:
    from collections.abc import Sequence

    from extractor.store import RunInfo, Store

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|min|h|d|w)$", re.IGNORECASE)
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_RUN_ID = re.compile(rf"^[0-9a-f]{{{MIN_ID_PREFIX},32}}$")
_NEWEST = re.compile(r"^latest(?:~(\d{1,4}))?$")
"""``latest`` (the newest run), ``latest~1`` (the one before it), ...: among the runs the other filters select."""

FILTER_KEYS = {
    "prompt": "prompt_version",
    "prompt_version": "prompt_version",
    "model": "model",
    "contract": "contract",
    "contract_hash": "contract_hash",
    "validator": "validator_version",
    "validator_version": "validator_version",
    "run": "run",
    "since": "since",
    "until": "until",
}


def parse_when(value: str, *, now: datetime | None = None) -> datetime:
    """``2026-05-01``, ``2026-05-01T12:30``, ``2026-05-01 12:30+02:00`` or relative ``90m``, ``12h``, ``7d``, ``2w``.

    Dates and times without an offset are UTC (the run log stores UTC), so the same command means the same
    thing on every machine.
    """
    text = value.strip()
    match = _RELATIVE.match(text)
    if match:
        amount, unit = float(match.group(1)), _UNITS[match.group(2).lower()]
        return (now or datetime.now(UTC)) - timedelta(**{unit: amount})
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"cannot read {value!r} as a time: use 2026-05-01, 2026-05-01T12:30 (UTC unless an offset is given) "
            "or a relative age such as 90m, 12h, 7d, 2w"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def newest(text: str) -> int | None:
    """``n`` when ``text`` is ``latest~n`` (0 for ``latest``), else None."""
    found = _NEWEST.match(text.strip().lower())
    return None if found is None else int(found.group(1) or 0)


@dataclass(frozen=True)
class RunFilter:
    """Which runs to take: every set field must match (``run`` is a run id or a unique prefix of one)."""

    run: str | None = None
    model: str | None = None
    prompt_version: str | None = None
    contract: str | None = None
    contract_hash: str | None = None  # a prefix of the contract's content hash (an edited contract is a new one)
    validator_version: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.run is not None and not _RUN_ID.match(self.run) and not _NEWEST.match(self.run):
            raise UsageError(f"run {self.run!r}: give a run id or at least {MIN_ID_PREFIX} of its first characters "
                             "(`extract runs` lists them), or latest, latest~1, ...")

    @property
    def newest(self) -> int | None:
        """``n`` of ``run=latest~n`` (0 for ``latest``): the n-th newest of the runs the other filters select."""
        return newest(self.run or "")

    @classmethod
    def parse(cls, spec: str) -> RunFilter:
        """A run id (or unique prefix), or ``key=value[,key=value]`` with keys
        prompt, model, contract, contract_hash, validator, run, since, until."""
        text = spec.strip()
        if not text:
            raise UsageError("empty run selection: give a run id or key=value filters")
        if "=" not in text:
            if not _RUN_ID.match(text.lower()) and not _NEWEST.match(text.lower()):
                raise UsageError(f"{spec!r} is neither a run id (at least {MIN_ID_PREFIX} characters), latest (latest~1 "
                                 "the run before it) nor key=value filters "
                                 f"(keys: {', '.join(sorted(set(FILTER_KEYS) - {'prompt_version', 'validator_version'}))})")
            return cls(run=text.lower())
        values: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not sep or not value:
                raise UsageError(f"{part!r} in {spec!r} is not key=value")
            if key not in FILTER_KEYS:
                raise UsageError(f"unknown filter {key!r} in {spec!r} (keys: prompt, model, contract, contract_hash, "
                                 "validator, run, since, until)")
            name = FILTER_KEYS[key]
            if name in values:
                raise UsageError(f"filter {key!r} given twice in {spec!r}")
            values[name] = parse_when(value) if name in ("since", "until") else value
        for name in ("run", "contract_hash"):
            if name in values:
                values[name] = values[name].lower()
        return cls(**values)

    def merged(self, **overrides: Any) -> RunFilter:
        """This filter with the non-None ``overrides`` set."""
        return replace(self, **{key: value for key, value in overrides.items() if value is not None})

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def describe(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                shown = value.isoformat(timespec="seconds") if isinstance(value, datetime) else value
                parts.append(f"{f.name}={shown}")
        return ",".join(parts) or "all runs"

    def select(self, store: Store, limit: int | None = None, *, every_run: bool = False,
               counts: bool = True) -> list[RunInfo]:
        """The matching runs, newest first. A run id prefix matching several runs raises ``ValueError``.
        ``counts=False``: without their document counts (``Store.find_runs``).

        Unless a run id is given (or ``every_run``: ``extract runs`` lists them all), only runs in which some
        document reached the model count: five mistyped file names (runs of unusable inputs alone) never push
        a real run out of ``stats``' default view or into a side of ``compare``. ``run=latest~n``: the n-th newest
        of those the other filters select (none when there are not that many).
        """
        newest = self.newest
        if newest is not None:
            found = replace(self, run=None).select(store, every_run=every_run)
            return found[newest:newest + 1]
        from extractor.providers import provider_model  # (here: listing runs needs no provider unless asked)

        runs = store.find_runs(
            id_prefix=self.run, model=self.model, provider_model=provider_model(self.model) if self.model else None,
            prompt_version=self.prompt_version, contract=self.contract,
            validator_version=self.validator_version, since=self.since, until=self.until,
            limit=None if self.contract_hash else limit, with_documents=self.run is None and not every_run,
            counts=counts,
        )
        if self.contract_hash is not None:  # recorded in the run's configuration, not a column: filtered here
            wanted = self.contract_hash
            runs = [run for run in runs if str((run.config or {}).get("contract_hash", "")).startswith(wanted)][:limit]
        if self.run is not None and len(self.run) < 32:
            exact = [run for run in runs if run.id == self.run]
            if exact:
                return exact
            if len(runs) > 1:
                raise UsageError(f"run id prefix {self.run!r} matches {len(runs)} runs: "
                                 + ", ".join(run.id[:12] for run in runs[:10]))
        return runs


def select_runs(store: Store, selections: Sequence[str], options: RunFilter, *, limit: int,
                counts: bool = True) -> list[RunInfo]:
    """The runs ``selections`` name (run ids or ``key=value`` filters, each narrowed by ``options``), or the
    newest runs matching ``options`` when there is none; newest first, at most ``limit`` (``counts=False``: without
    their document counts).

    A selection that matches no run is an error naming it, not an empty answer.
    """
    chosen = {run.id: run for run in options.select(store, limit=limit, counts=counts)} if not selections else {}
    narrowing = {f.name: getattr(options, f.name) for f in fields(options)}
    for spec in selections:
        matched = RunFilter.parse(spec).merged(**narrowing).select(store, limit=limit, counts=counts)
        if not matched:
            raise UsageError(f"{spec!r} selects no run")
        for run in matched:
            chosen.setdefault(run.id, run)
    return sorted(chosen.values(), key=lambda r: (r.started_at, r.id), reverse=True)[:limit]
