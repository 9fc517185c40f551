"""Contracts written as files: ``<dir>/<name>/v<N>/`` with ``schema.json`` and ``checks.toml``.

``schema.json`` is JSON Schema 2020-12 of the record alone (its ``description``s reach the prompt; a field
that may be null is one the source may leave open, so NEEDS_INPUT); the standard envelope is added
(``extractor.contracts.envelope``). ``checks.toml`` (TOML: comments, no quoting of keys; read by the
standard library's ``tomllib``) holds ``[evidence]``, ``[guards]`` and ``[modes]`` settings and the ``[[check]]``
declarations: its shape is ``extractor.configfile.ChecksFile``, and what it says about the schema, the folder and
the rules is checked here and in ``extractor.rules.declared``. Templates in ``prompts/<version>/`` override the
generic ones part by part.

A contract is checked completely when it is loaded, before any model call: every problem is one line
naming the file and the key (``problems``; ``checks.toml: check[2].catalogue: ...``), and a broken contract is
refused with all of them (``ContractError``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts.envelope import ENVELOPE, envelope_problems, with_envelope
from extractor.contracts.merge_spec import EVIDENCE_KEY, ListMerge, MergeSpec, Reference
from extractor.contracts.registry import (
    SCHEMA_DIALECT,
    Contract,
    contracts,
    lookup,
    names,
    register,
    registered,
    search_dirs,
)
from extractor.errors import ContractError, InputError
from extractor.evidence import fieldpath
from extractor.resources import data_dir
from extractor.rules import STAGES, Card, Rule
from extractor.rules import generic as generic_rules
from extractor.rules.catalogue import shared_cards
from extractor.rules.guards import Guards

if TYPE_CHECKING:
    from pydantic import BaseModel

    from extractor.configfile import ChecksFile, EvidenceTable, GuardsTable, ModesTable, ReviewTable

SCHEMA_FILE = "schema.json"
CHECKS_FILE = "checks.toml"
TEMPLATES_DIR = "prompts"
_VERSION = re.compile(r"^v([1-9][0-9]*)$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
CALIBRATION_FILE = "calibration.json"
"""Written by ``extract rules calibrate`` (machine-made, beside the person-made checks.toml): the fitted
threshold, judge band and calibration record of each lexical-support rule, read over ``[evidence]``."""


@dataclass(frozen=True)
class Found:
    """A contract folder on the search path."""

    name: str
    version: int
    folder: Path


def discover(dirs: Iterable[Path] | None = None) -> list[Found]:
    """Every ``<dir>/<name>/v<N>/`` holding a ``schema.json``, by name and version (first folder wins)."""
    found: dict[tuple[str, int], Found] = {}
    for root in search_dirs() if dirs is None else dirs:
        for schema in sorted(root.glob(f"*/v*/{SCHEMA_FILE}")):
            folder = schema.parent
            version = _VERSION.match(folder.name)
            if version and _NAME.match(folder.parent.name):
                found.setdefault((folder.parent.name, int(version.group(1))),
                                 Found(folder.parent.name, int(version.group(1)), folder))
    return sorted(found.values(), key=lambda f: (f.name, f.version))


def load_named(name: str) -> None:
    """Register every version of ``name`` found on the search path (nothing when there is none)."""
    for found in discover():
        if found.name == name and registered(found.name, found.version) is None:
            register(load(found.folder))


def get_contract(name: str, version: int | None = None) -> Contract:
    """A registered contract (its latest version by default); ``KeyError`` names the known contracts.

    A name not registered yet is looked for in the contract folders (``search_dirs``); a broken contract
    there raises ``ContractError`` (one line per problem).
    """
    if name not in names():
        load_named(name)
    return lookup(name, version)


def catalogue(contract: str | None = None) -> list[Card]:
    """All cards in stage order (the rules every contract runs, then each contract's own), optionally of one
    contract only: the rules a contract runs are the ones it holds."""
    chosen = [get_contract(contract)] if contract else contracts()
    cards = shared_cards() + [r.card for spec in chosen for r in spec.rules]
    return sorted(cards, key=lambda card: STAGES.index(card.stage))


def file_hashes(folder: Path, extra: Iterable[Path] = ()) -> dict[str, str]:
    """The sha256 of each of the contract's files, by name (relative to ``folder``): schema, checks, templates,
    catalogues. A run records them, so a later command can say which files changed since (``recorded``)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {(path.relative_to(folder).as_posix() if path.is_relative_to(folder) else path.as_posix()):
            hashlib.sha256(path.read_bytes()).hexdigest() for path in [*files, *sorted(set(extra) - set(files))]}


def combined_hash(files: Mapping[str, str]) -> str:
    """The contract's content hash: sha256 over its files' names and digests (``file_hashes``), in order."""
    digest = hashlib.sha256()
    for name, file_digest in files.items():
        digest.update(name.encode() + b"\0" + bytes.fromhex(file_digest))
    return digest.hexdigest()


def problems(folder: Path) -> list[str]:
    """Every problem of the contract in ``folder``, one line each (empty when it can be used)."""
    try:
        load(folder)
    except ContractError as error:
        return error.problems
    return []


def load(folder: Path, *, prompts: Path | None = None, pydantic: type[BaseModel] | None = None) -> Contract:
    """The contract in ``folder`` as a spec, or ``ContractError`` listing every problem found."""
    folder = folder.resolve()
    version_match = _VERSION.match(folder.name)
    name = folder.parent.name
    lines: list[str] = []
    if not version_match or not _NAME.match(name):
        raise ContractError([f"{folder}: a contract folder is <name>/v<N>/ with a lowercase name, e.g. "
                             "purchase_order/v1"])
    version = int(version_match.group(1))
    record = _read_schema(folder / SCHEMA_FILE, lines)
    checks = _read_checks(folder / CHECKS_FILE, lines)
    if record is None or checks is None:
        raise ContractError(lines)
    where = folder / CHECKS_FILE
    settings, shape_text, exempt = _evidence_settings(checks.evidence, record, where, lines)
    guards = _guards(checks.guards, record, where, lines)
    settings = with_calibration(settings | _modes(checks.modes) | _review(checks.review), folder, lines)
    example_list = next((key for key, value in record.get("properties", {}).items()
                         if key not in ENVELOPE and value.get("type") == "array"), "items")
    example_field = next((key for key in record.get("properties", {}) if key not in ENVELOPE), "field")
    schema = with_envelope(record, example_field, example_list)
    from extractor.configfile import SequenceCheck, UniqueCheck
    from extractor.rules import declared

    rules: list[Rule[Any]] = generic_rules.for_contract(name)
    known = {rule.card.rule_id for rule in rules} | {card.rule_id for card in shared_cards()}
    uniques: list[tuple[str, bool]] = []
    sequences: list[str] = []
    references: list[tuple[str, str]] = []
    labels: list[generic_rules.Label] = []
    needs_person: set[str] = set()
    catalogues: list[Path] = []
    for index, check in enumerate(checks.check):
        try:
            made = declared.build(name, schema, folder, check, known)
        except declared.CheckError as error:
            lines.append(f"{where}: check[{index}].{error.key}: {error}")
            continue
        rules.extend(made.rules)
        needs_person |= made.needs_person
        catalogues.extend(made.files)
        if isinstance(check, UniqueCheck):
            uniques.append((made.field, check.normalise != "none"))
        elif isinstance(check, SequenceCheck):
            sequences.append(made.field)
        elif made.type == "reference" and made.target:
            references.append((made.field, made.target))
            source_list, _, source_field = made.field.rpartition("[].")
            target_list, _, target_key = made.target.rpartition("[].")
            if source_list and target_list and "[]" not in source_field + target_key:
                labels.append(generic_rules.Label(tuple(source_list.split(".")), source_field,
                                                  tuple(target_list.split(".")), target_key))
    if checks.modes is not None and not lines:
        lines.extend(f"{where}: {problem}" for problem in _mode_problems(
            checks.modes, [rule.card for rule in rules] + shared_cards(), settings, needs_person))
    if lines:
        raise ContractError(lines)
    rules.sort(key=lambda rule: STAGES.index(rule.card.stage))
    shape = generic_rules.Shape.of(schema, shape_text, exempt, labels)
    override = folder / TEMPLATES_DIR
    hashes = file_hashes(folder, catalogues)
    return Contract(
        name=name, version=version, schema=schema, settings={**settings, "needs_person": sorted(needs_person)},
        guards=guards,
        model=generic_rules.evidence_model(shape), rules=tuple(rules), folder=folder,
        prompts=prompts or override, pydantic=pydantic,
        prompt_fallback=None if prompts else data_dir("prompts") / "generic",
        content_hash=combined_hash(hashes), content_files=hashes,
        merge=_merge_spec(shape, uniques, sequences, references),
        from_files=True,
    )


def _merge_spec(shape: generic_rules.Shape, uniques: list[tuple[str, bool]], sequences: list[str],
                references: list[tuple[str, str]]) -> MergeSpec:
    """How windows of a long document merge, read from the declared checks: a list's items are one when a
    ``unique`` field matches (normalised when the check normalises), else when their evidence starts at the
    same place (object items) or their text matches (plain items); the field other items refer to is an id,
    reconciled rather than matched; a ``sequence`` field is renumbered in source order."""

    def split(path: str) -> tuple[str, str]:
        list_path, _, key = path.rpartition("[].")
        return list_path, key

    ids = {split(target)[0]: split(target)[1] for _, target in references}
    lists: list[ListMerge] = []
    for shaped in shape.lists:
        if len(shaped.path) != 1:
            continue  # only top-level lists are merged item by item; a nested list travels with its item
        path = shaped.path[0]
        id_field = ids.get(path)
        identity = tuple(("~" if normalised else "") + split(field)[1] for field, normalised in uniques
                         if split(field)[0] == path and split(field)[1] != id_field)
        if not identity:
            identity = (EVIDENCE_KEY,) if shaped.text else ("~",)
        order = next((split(field)[1] for field in sequences if split(field)[0] == path), None)
        lists.append(ListMerge(path, identity, id_field, order))
    lists.sort(key=lambda item: item.id_field is None)  # targets of references first
    refs = tuple(Reference(split(field)[0], split(field)[1], split(target)[0]) for field, target in references
                 if "." not in split(field)[0] and "[]" not in split(field)[1])
    scalars = tuple(dict.fromkeys(path[0] for path in shape.scalars))
    return MergeSpec(tuple(lists), scalars, refs)


def _read_schema(path: Path, lines: list[str]) -> dict[str, Any] | None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        lines.append(f"{path}: missing (a contract folder needs schema.json)")
        return None
    except (OSError, UnicodeDecodeError) as error:
        lines.append(f"{path}: cannot be read ({error})")
        return None
    except json.JSONDecodeError as error:
        lines.append(f"{path}: not JSON: {error.msg} at line {error.lineno} column {error.colno}")
        return None
    if not isinstance(schema, dict):
        lines.append(f"{path}: the root must be a JSON Schema object")
        return None
    if schema.get("$schema", SCHEMA_DIALECT) != SCHEMA_DIALECT:
        lines.append(f"{path}: $schema must be {SCHEMA_DIALECT} (JSON Schema 2020-12)")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        at = "/".join(map(str, error.absolute_path)) or "the root"
        lines.append(f"{path}: invalid JSON Schema at {at}: {error.message}")
        return None
    if schema.get("type") != "object" or not schema.get("properties"):
        lines.append(f'{path}: the root must be an object with properties ("type": "object"), not '
                     f"{schema.get('type', 'untyped')!r}")
        return None
    cycle = _recursion(schema)
    if cycle:
        lines.append(f"{path}: recursive schema ({cycle}); a record must have a fixed depth")
        return None
    outside = sorted({ref for ref in _refs(schema) if not ref.startswith("#/$defs/")
                      or ref.removeprefix("#/$defs/") not in schema.get("$defs", {})})
    if outside:
        lines.append(f"{path}: only references to this file's $defs are allowed, not {', '.join(outside)}")
        return None
    lines.extend(f"{path}: {problem}" for problem in envelope_problems(schema))
    lines.extend(f"{path}: {problem}" for problem in _enum_words_problems(schema))
    return schema


_WORD_LANGUAGES = ("en", "ko", "ru")


def _enum_words_problems(node: Any, at: str = "") -> Iterable[str]:
    """What is wrong with each ``x-enum-words`` of the schema: an object on a node with ``enum``, keyed by its
    values, each giving lists of words per language (docs/contracts.md#enum-words)."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _enum_words_problems(item, f"{at}/{index}")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key != generic_rules.ENUM_WORDS:
            yield from _enum_words_problems(value, f"{at}/{key}")
            continue
        where = f"{generic_rules.ENUM_WORDS} at {at or 'the root'}"
        enum = node.get("enum")
        if not isinstance(enum, list) or not isinstance(value, dict):
            yield f"{where} must be an object on a node with an enum"
            continue
        for code, by_language in value.items():
            if code not in enum:
                yield f"{where}: {code!r} is not one of its enum values"
            elif not isinstance(by_language, dict) or not by_language:
                yield f'{where}: {code!r} must map languages to word lists, e.g. {{"en": ["US dollars"]}}'
            else:
                for language, words in by_language.items():
                    if language not in _WORD_LANGUAGES:
                        yield f"{where}: {code!r} has language {language!r} (known: {', '.join(_WORD_LANGUAGES)})"
                    elif not isinstance(words, list) or not words or not all(
                            isinstance(word, str) and word.strip() for word in words):
                        yield f"{where}: {code!r} {language} must be a list of non-empty strings"


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _recursion(schema: Mapping[str, Any]) -> str | None:
    """A ``$ref`` cycle among the schema's definitions (``A -> B -> A``), or ``None``."""
    definitions = schema.get("$defs", {})
    edges = {name: [ref.removeprefix("#/$defs/") for ref in _refs(body)] for name, body in definitions.items()}
    edges["#"] = [ref.removeprefix("#/$defs/") for ref in _refs({k: v for k, v in schema.items() if k != "$defs"})]
    if "#" in edges["#"] or any("#" in targets for targets in edges.values()):
        return "a reference to the root (#)"
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> str | None:
        if state.get(node) == 1:
            return " -> ".join([*trail[trail.index(node):], node])
        if state.get(node) == 2 or node not in edges:
            return None
        state[node] = 1
        for target in edges[node]:
            found = visit(target, [*trail, node])
            if found:
                return found
        state[node] = 2
        return None

    for start in edges:
        found = visit(start, [])
        if found:
            return found
    return None


def _read_checks(path: Path, lines: list[str]) -> ChecksFile | None:
    """``checks.toml`` as ``extractor.configfile.ChecksFile`` (an empty one when the folder has none), or ``None``
    with a line per problem of its shape, each naming the key (``check[2].column: missing``)."""
    import tomllib

    from pydantic import ValidationError

    from extractor.configfile import ChecksFile, problems, read_text

    if not path.exists():
        return ChecksFile()
    try:
        data = tomllib.loads(read_text(path, "checks file"))
    except InputError as error:
        lines.append(str(error))
        return None
    except tomllib.TOMLDecodeError as error:
        lines.append(f"{path}: not TOML: {error}")
        return None
    try:
        return ChecksFile.model_validate(data)
    except ValidationError as error:
        lines.extend(f"{path}: {problem}" for problem in problems(error))
        return None


def _guards(table: GuardsTable, record: Mapping[str, Any], where: Path, lines: list[str]) -> Guards:
    """``[guards]``: the built-in critical and extent checks (``extractor.rules.guards.Guards``); the values
    they read are the record's own fields unless ``value_fields`` says otherwise."""
    fields = [key for key in record.get("properties", {}) if key not in ENVELOPE]
    for index, named in enumerate(table.value_fields or ()):
        if named not in fields:
            lines.append(f"{where}: guards.value_fields[{index}]: {named!r} is no field of schema.json's record "
                         f"(fields: {', '.join(fields)})")
    return Guards.from_table(table, value_fields=fields)


def _modes(modes: ModesTable | None) -> dict[str, Any]:
    """``[modes]`` as the settings hold it: observe/review/block per rule id and per judge metric
    (``extractor.contracts.settings``)."""
    return {} if modes is None else {"modes": modes.model_dump(mode="json", exclude_unset=True)}


def _mode_problems(modes: ModesTable, cards: Iterable[Card], settings: Mapping[str, Any],
                   needs_person: Collection[str]) -> Iterable[str]:
    """What is wrong with ``[modes] rules``: a rule id the contract does not run (a misspelt one would change
    nothing), an error rule set to observe."""
    from extractor.contracts.settings import Modes, SettingsError, rule_mode
    from extractor.vocab import Severity

    severity = {card.rule_id: card.severity for card in cards}
    parsed = Modes.parse(_modes(modes))
    for rule_id in modes.rules:
        if rule_id not in severity:
            yield f"modes.rules.{rule_id} (the name): names no rule of this contract (extract rules --contract NAME " \
                  "lists them)"
            continue
        try:
            rule_mode(settings, parsed, rule_id, error=severity[rule_id] is Severity.ERROR, needs_person=needs_person)
        except SettingsError as error:
            yield str(error)


def _review(table: ReviewTable | None) -> dict[str, Any]:
    """``[review]`` as the settings hold it; absent, the settings stay as they were (one approval), so a contract
    without it keeps its configuration hash."""
    return {} if table is None else {"review": {"approvals": table.approvals}}


def with_calibration(settings: Mapping[str, Any], folder: Path, lines: list[str]) -> dict[str, Any]:
    """``settings`` with what ``calibration.json`` in ``folder`` fitted laid over each section it names (its
    shape is ``extractor.configfile.CalibrationFile``; a problem is a line naming the file and the key)."""
    from extractor.contracts.settings import CALIBRATED_RULES

    path = folder / CALIBRATION_FILE
    if not path.exists():
        return dict(settings)
    try:
        fitted = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        lines.append(f"{path}: cannot be read ({error})")
        return dict(settings)
    from extractor.configfile import CalibrationFile, validated

    try:
        validated(path, fitted, CalibrationFile)
    except InputError as error:
        lines.append(f"{error} (sections: {', '.join(sorted(set(CALIBRATED_RULES.values())))})")
        return dict(settings)
    return {**settings, **{section: {**settings.get(section, {}), **values} for section, values in fitted.items()}}


def _evidence_settings(evidence: EvidenceTable, record: Mapping[str, Any], where: Path, lines: list[str]
                       ) -> tuple[dict[str, Any], dict[str, tuple[str, ...]], list[tuple[str, ...]]]:
    """``[evidence]`` (``extractor.configfile.EvidenceTable``): normalisation, limits, an object list's text fields
    and the exempt paths; the fields they name must be the schema's."""
    settings: dict[str, Any] = {"evidence_normalisation": evidence.normalisation,
                                "max_occurrences_per_excerpt": evidence.max_occurrences_per_excerpt,
                                "weak_support": {"threshold": evidence.weak_support_threshold}}
    text: dict[str, tuple[str, ...]] = {}
    for list_path, fields in evidence.text.items():
        for name in fields:
            steps = fieldpath.parse(f"{list_path}[0].{name}")
            if steps is None or not fieldpath.in_schema(record, steps):
                lines.append(f"{where}: evidence.text.{list_path}: {list_path}[].{name} names no field of schema.json")
        text[list_path] = tuple(fields)
    exempt: list[tuple[str, ...]] = []
    for index, raw in enumerate(evidence.exempt):
        steps = fieldpath.parse(raw)
        if steps is None or not fieldpath.in_schema(record, steps) or any(isinstance(s, int) for s in steps):
            lines.append(f"{where}: evidence.exempt[{index}]: {raw!r} names no field of schema.json (no indices)")
        else:
            exempt.append(tuple(str(s) for s in steps))
    return settings, text, exempt


@dataclass(frozen=True)
class Listed:
    """One line of ``extract contracts``: a usable contract, or a broken one with its problems."""

    name: str
    version: int
    kind: str  # "built-in", "files" or "code"
    folder: Path
    content_hash: str = ""
    rules: int = 0
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "kind": self.kind, "folder": str(self.folder),
                "content_hash": self.content_hash, "rules": self.rules, "problems": list(self.problems)}


def listing() -> list[Listed]:
    """The built-in contracts, then every contract folder on the search path (loaded, or its problems)."""
    rows: dict[tuple[str, int], Listed] = {}
    for contract in contracts():
        kind = "built-in" + ("" if contract.from_files else " (code rules)")
        rows[(contract.name, contract.version)] = Listed(contract.name, contract.version, kind, contract.folder,
                                                         contract.content_hash, len(contract.rules))
    for found in discover():
        if (found.name, found.version) in rows and rows[(found.name, found.version)].folder == found.folder:
            continue
        try:
            known = registered(found.name, found.version)
            contract = known if known is not None and known.folder == found.folder else load(found.folder)
        except ContractError as error:
            rows.setdefault((found.name, found.version), Listed(found.name, found.version, "files", found.folder,
                                                                problems=tuple(error.problems)))
            continue
        rows.setdefault((found.name, found.version), Listed(found.name, found.version, "files", found.folder,
                                                            contract.content_hash, len(contract.rules)))
    return sorted(rows.values(), key=lambda row: (row.name, row.version))
