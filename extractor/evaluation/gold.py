"""Gold sets: the records a run is scored against (docs/design.md#evaluation).

A gold set is a folder: ``gold.toml`` naming the contract and its version, and one JSON file per document,
named by the document's file name (``en_purchase_order.md.json``, or ``en_purchase_order.json`` when the stem
is unambiguous) or by its content sha256 (``<64 hex>.json``). Each file holds the contract's record; an
``evidence`` list (``{fieldPath, sourceExcerpt}``, gold's own 0-based indices) is optional and scores the
candidates' evidence; the other envelope parts are allowed and ignored. A file that does not match the
contract's schema is refused with one line naming it: a wrong gold record would score every run wrongly.

``extract gold export`` writes a gold set from approved records: each record as the reviewer approved it, and
in ``gold.toml`` per file who approved it, when, whether it was edited, and the document it describes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts.envelope import ENVELOPE
from extractor.errors import InputError, UsageError

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.store.approved import ApprovedRecordInfo

MANIFEST = "gold.toml"
MAX_GOLD_BYTES = 20 * 1024 * 1024
"""A gold record larger than this is refused before it is read (a gold file is one document's record)."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class GoldRecord:
    """One document's gold: its record, its evidence entries, and how it was named."""

    name: str
    """The file's name without ``.json``: a document file name, its stem, or a sha256."""
    path: Path
    record: dict[str, Any]
    evidence: tuple[tuple[str, str], ...] = ()
    """``(fieldPath, sourceExcerpt)`` pairs."""

    @property
    def sha256(self) -> str | None:
        return self.name if _SHA256.match(self.name) else None


@dataclass
class GoldSet:
    """A gold folder, read and checked against its contract."""

    folder: Path
    contract: str
    version: int
    records: list[GoldRecord] = field(default_factory=list)
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per file name (as in the folder): what ``gold export`` recorded about it."""

    @property
    def contract_id(self) -> str:
        return f"{self.contract}@v{self.version}"

    def match(self, sha256: str, path: str) -> GoldRecord | None:
        """The gold record of a document: by content sha256, else by file name, else by stem (when unique)."""
        return self._by_sha.get(sha256) or self._by_name.get(Path(path).name) or self._by_stem.get(Path(path).stem)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self._by_sha = {r.sha256: r for r in self.records if r.sha256}
        self._by_name = {r.name: r for r in self.records if not r.sha256}
        stems: dict[str, list[GoldRecord]] = {}
        for record in self.records:
            if not record.sha256 and "." not in record.name:
                stems.setdefault(record.name, []).append(record)
        self._by_stem = {stem: found[0] for stem, found in stems.items() if len(found) == 1}

    def digest(self) -> str:
        """sha256 over the manifest and every record file (names and bytes): which gold a stored score used."""
        import hashlib

        digest = hashlib.sha256()
        for path in sorted([self.folder / MANIFEST, *(r.path for r in self.records)]):
            digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()


def read_manifest(folder: Path) -> tuple[str, int, dict[str, dict[str, Any]]]:
    """``(contract, version, provenance)`` from ``gold.toml`` (``extractor.configfile.GoldManifest``); one-line
    errors name the file and the key."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such gold folder (a folder with {MANIFEST} and one JSON record per document)")
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise InputError(str(manifest), "missing: a gold folder names its contract there "
                                        "(contract = \"work_procedure\", version = 1)")
    from extractor.configfile import GoldManifest, read_toml

    read = read_toml(manifest, GoldManifest, "gold manifest")
    return read.contract, read.version, {name: document.model_dump(exclude_none=True)
                                         for name, document in read.documents.items()}


def load_gold(folder: Path, contract: Contract) -> GoldSet:
    """Read a gold folder and check every record against ``contract`` (which ``gold.toml`` must name)."""
    name, version, provenance = read_manifest(folder)
    if (name, version) != (contract.name, contract.version):
        raise UsageError(f"{folder / MANIFEST} names {name}@v{version}, not {contract.id}")
    validator = gold_validator(contract)
    records = []
    for path in sorted(folder.glob("*.json")):
        records.append(read_record(path, contract, validator))
    if not records:
        raise InputError(str(folder), "no gold record (*.json) in the folder")
    duplicated = sorted(name for name, count in Counter(r.name for r in records).items() if count > 1)
    if duplicated:
        raise InputError(str(folder), f"two gold files for {', '.join(duplicated)}")
    return GoldSet(folder, name, version, records, provenance)


def gold_validator(contract: Contract) -> Any:
    """A JSON Schema validator for a gold file: the contract's record, with the envelope parts optional (the
    validator the rules use: jsonschema-rs accepts valid records fast, python-jsonschema names the first error)."""
    from extractor.contracts import inline_refs
    from extractor.rules.schema import SchemaValidator

    schema = inline_refs(contract.schema)
    schema["required"] = [name for name in schema.get("required", []) if name not in ENVELOPE]
    return SchemaValidator(schema)


def read_record(path: Path, contract: Contract, validator: Any) -> GoldRecord:
    """One gold file, refused with one line naming it unless it is a record of ``contract``."""
    try:
        size = path.stat().st_size
        if size > MAX_GOLD_BYTES:
            raise InputError(str(path), f"{size / 1e6:.1f} MB, over the {MAX_GOLD_BYTES / 1e6:.0f} MB limit of a gold record")
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as error:
        raise InputError(str(path), f"cannot read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise InputError(str(path), "not UTF-8 text") from None
    except (ValueError, RecursionError) as error:
        raise InputError(str(path), f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputError(str(path), f"a gold record is a JSON object, not {type(data).__name__}")
    problem = next(iter(sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))), None)
    if problem is not None:
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem.absolute_path)
        raise InputError(str(path), f"does not match {contract.id}: {where}: {problem.message[:300]}")
    evidence = tuple((entry["fieldPath"], entry["sourceExcerpt"]) for entry in data.get("evidence") or ())
    record = {key: value for key, value in data.items() if key not in ENVELOPE}
    return GoldRecord(path.name[: -len(".json")], path, record, evidence)


# -- export -------------------------------------------------------------------------------------------------------


def export_gold(records: Iterable[ApprovedRecordInfo], folder: Path, *, replace: bool = False) -> list[Path]:
    """Write a gold set from approved records (all of one contract version) into ``folder``.

    Files are named by the document's file name, or by its sha256 where two documents share a name. The folder
    is written beside its target and renamed into place, so a failure leaves no half gold set; an existing gold
    folder is replaced only with ``replace``.
    """
    chosen = list(records)
    if not chosen:
        raise UsageError("no approved record matches: nothing to export (approve records with `extract approve`)")
    versions = sorted({(r.contract, r.contract_version) for r in chosen})
    if len(versions) > 1:
        raise UsageError("approved records of several contracts match ("
                         + ", ".join(f"{c}@v{v}" for c, v in versions) + "); choose one with --contract and --version")
    contract, version = versions[0]
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MANIFEST).is_file():
            raise UsageError(f"{folder} exists and is not a gold folder: choose a new or empty folder")
        if not replace:
            raise UsageError(f"{folder} holds a gold set already; pass --replace to write over it")
    names = [Path(r.document_path).name for r in chosen]
    counts = Counter(names)
    files: dict[str, ApprovedRecordInfo] = {}
    for record, name in zip(chosen, names):
        key = name if counts[name] == 1 and name else record.document_sha256
        files[f"{key}.json"] = record
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for file_name, approved in files.items():
            (staging / file_name).write_text(json.dumps(gold_record(approved), ensure_ascii=False, indent=2) + "\n",
                                             encoding="utf-8")
        (staging / MANIFEST).write_text(manifest_text(contract, version, files), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [folder / name for name in files]


def gold_record(approved: ApprovedRecordInfo) -> dict[str, Any]:
    """The record as approved, with its evidence excerpts (gold's fieldPaths are the record's own)."""
    record = {key: value for key, value in approved.record.items() if key not in ENVELOPE}
    evidence = approved.record.get("evidence")
    if isinstance(evidence, list) and evidence:
        record["evidence"] = evidence
    return record


def manifest_text(contract: str, version: int, files: Mapping[str, ApprovedRecordInfo]) -> str:
    """``gold.toml`` (``extractor.configfile.GoldManifest``): the contract, then per file where its record came
    from."""
    import tomli_w

    documents = {file_name: {"sha256": approved.document_sha256, "path": approved.document_path,
                             "reviewer": approved.reviewer, "approved_at": approved.approved_at,
                             "edited": approved.edited, "run_id": approved.run_id or ""}
                 for file_name, approved in files.items()}
    return ("# A gold set written by `extract gold export`: one record per document as a person approved it.\n"
            + tomli_w.dumps({"contract": contract, "version": version, "documents": documents}))
