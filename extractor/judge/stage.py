"""The judge stage: one call per document asking whether each evidence excerpt supports its value.

Why only excerpts and values (not the whole document): exact match already proved every excerpt exists
in the source; what rules cannot prove is that the excerpt *says* the value (docs/design.md#judge). A short,
fixed rubric over short links keeps the judge cheap and its answers comparable with the calibration set,
which has the same shape (one value, one excerpt, one human label).

Why no call for an empty context: with no link there is nothing to judge, and the answer would be an
invented number; the outcome is ``not_evaluable``, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from string import Template
from typing import Any, Literal

from extractor.contracts import get_contract
from extractor.evidence.report import JudgeLink, Report
from extractor.generate import GenerationRequest, GenerationResult, Provider, ProviderError
from extractor.judge.verdict import VERDICT_SCHEMA, ParsedVerdict, ProtocolError, parse_verdict
from extractor.resources import data_dir
from extractor.vocab import DEFAULT_RUBRIC

MAX_TEXT_CHARS = 2000
"""A value or excerpt longer than this is cut in the request (and the cut is marked): the judge compares
statements, and one runaway value must not blow the context window."""

OutcomeKind = Literal["judged", "not_evaluable", "protocol_error", "transport_error"]


@dataclass(frozen=True)
class Rubric:
    """``prompts/judge/<version>/``: the version is the folder name and is recorded with every call.

    ``regenerate`` is the instruction of the one regeneration after a judge fail (docs/design.md#judge).
    """

    version: str
    system: Template
    user: Template
    regenerate: Template

    @property
    def prompt_version(self) -> str:
        """What a judge attempt records as its prompt version."""
        return f"judge/{self.version}"


@cache
def load_rubric(version: str = DEFAULT_RUBRIC) -> Rubric:
    """Read one rubric version; ``FileNotFoundError`` names the versions that exist."""
    folder = data_dir("prompts") / "judge" / version
    if not all((folder / f"{part}.txt").is_file() for part in ("system", "user", "regenerate")):
        known = sorted(p.name for p in (data_dir("prompts") / "judge").glob("v*") if p.is_dir()) or ["none"]
        raise FileNotFoundError(f"no judge rubric judge/{version} (have: {', '.join(known)})")
    read = lambda part: Template((folder / f"{part}.txt").read_text(encoding="utf-8"))  # noqa: E731
    return Rubric(version, read("system"), read("user"), read("regenerate"))


def model_id(provider: Provider) -> str:
    """How a judge model is named in run configs and calibration reports: ``<provider>:<model>``."""
    return f"{provider.name}:{provider.model}"


def links_for(report: Report) -> list[JudgeLink]:
    """The links of a candidate that passed the rules, as its contract reads them (only found excerpts)."""
    return get_contract(report.contract, report.contract_version).model.links(report)


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_TEXT_CHARS else flat[:MAX_TEXT_CHARS] + " [… cut]"


def render_judge_request(rubric: Rubric, contract: str, links: list[JudgeLink]) -> GenerationRequest:
    """The one judge request: fixed rubric, the links numbered 0..n-1, temperature 0."""
    lines = "\n\n".join(
        f"[{link.index}] field: {link.field_path}\nvalue: {_cut(link.value)}\nexcerpt: {_cut(link.excerpt)}"
        for link in links
    )
    user = rubric.user.substitute(contract=contract, count=len(links), links=lines)
    system = rubric.system.substitute()
    return GenerationRequest(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        schema=VERDICT_SCHEMA,
        schema_name=f"judge_verdict_{rubric.version}",
        temperature=0.0,
        shared=(system,),
    )


@dataclass
class JudgeOutcome:
    """What one judge stage produced for one document, whatever happened."""

    kind: OutcomeKind
    links: list[JudgeLink]
    request: GenerationRequest | None = None  # None: no call was made (empty context)
    result: GenerationResult | None = None
    verdict: ParsedVerdict | None = None
    error: str | None = None  # protocol error reason, transport cause, or why not evaluable
    transport: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        if self.result is None:
            return 0
        return (self.result.prompt_tokens or 0) + (self.result.completion_tokens or 0)


async def run_judge(provider: Provider, rubric: Rubric, contract: str, links: list[JudgeLink],
                    max_tokens: int | None = None) -> JudgeOutcome:
    """Judge ``links`` with one call (sent with ``max_tokens`` as its output limit when given: a budget's); never
    raises for what the model or the network did."""
    if not links:
        return JudgeOutcome("not_evaluable", links, error="no evidence link with a found excerpt: nothing to judge "
                            "(no call made)")
    request = render_judge_request(rubric, contract, links)
    if max_tokens is not None:
        request = replace(request, max_tokens=max_tokens)
    try:
        result = await provider.generate(request)
    except ProviderError as error:
        return JudgeOutcome("transport_error", links, request, error=error.cause,
                            transport=[t.to_json() for t in error.transport])
    transport = [t.to_json() for t in result.transport]
    try:
        verdict = parse_verdict(result.text, [link.index for link in links])
    except ProtocolError as error:
        reason = error.reason
        if result.finish_reason == "length":
            reason += " (the answer was cut off at the token limit)"
        return JudgeOutcome("protocol_error", links, request, result, error=reason, transport=transport)
    if verdict.status == "not_evaluable":
        return JudgeOutcome("not_evaluable", links, request, result, verdict,
                            error=f"the judge answered not_evaluable: {verdict.comment or 'no comment'}",
                            transport=transport)
    return JudgeOutcome("judged", links, request, result, verdict, transport=transport)
