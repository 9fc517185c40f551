"""One claimed document to its conversion: generate, validate, at most one repair, judge, route.

``convert`` is the whole per-document procedure and returns a ``Conversion`` (where the document goes and
why); it reaches the model and the run log only through ``ModelCalls``, whose calls are bounded by the run's
limit, cut short when the run stops, and recorded as they happen. A different procedure plugs into the
engine as another ``Converter`` built on the same calls (``extractor.engine.calls``): a long document asks
once per window (``extractor.engine.windowed``: ``ModelCalls.ask``, each window an attempt), merges the
answers into one candidate and checks it whole (``ModelCalls.check``).
"""

from __future__ import annotations

from extractor.engine.calls import Answer, Conversion, Job, JudgeCall, ModelCalls, rule_ids
from extractor.engine.route import route
from extractor.engine.windowed import convert_windows
from extractor.generate import GenerationRequest, ProviderError
from extractor.generate.prompt import render_request
from extractor.repair import render_repair
from extractor.vocab import REGENERATE_NUMBER, AttemptKind, DocumentState, JudgeResult
from extractor.windows.plan import BudgetError


async def convert(job: Job, calls: ModelCalls) -> Conversion:
    """Generate; if the candidate fails, one repair that names every finding; judge what passed; route.

    Per document and run at most five model calls (``CALL_BOUND``): generate, one repair, one judge call;
    after a judge ``fail`` (review or block mode) one regeneration with stronger context, validated and
    judged again; a second fail goes to a person. A generation call that got no answer ends the document
    in ERROR (nothing was decided, a rerun retries it). A candidate with a critical finding is not
    repaired: the document is BLOCKED with it as its final attempt (a repair could only hide what the model did).
    A document too long for one call under the run's token budgets is read in windows instead
    (``extractor.engine.windowed``).
    """
    settings = calls.settings
    try:
        windows = calls.windows(job.document)
    except BudgetError as error:
        return Conversion(DocumentState.ERROR, str(error))
    if len(windows) > 1:
        return await convert_windows(job, calls, windows)
    request = render_request(calls.prompt, settings.contract, job.document, temperature=settings.temperature,
                             max_tokens=settings.options.max_tokens)
    try:
        first = await calls.generate(job, request, number=1, kind=AttemptKind.generate)
    except ProviderError as error:
        return Conversion(DocumentState.ERROR, error.cause)
    final, earlier, tokens = first, None, first.tokens
    if not first.report.passed and not first.report.critical:  # a critical finding is BLOCKED, never repaired away
        repair = render_repair(calls.prompt, request, first.result.text, first.report, job.document,
                               settings.contract)
        try:
            final = await calls.generate(job, repair, number=2, kind=AttemptKind.repair)
        except ProviderError as error:
            return Conversion(DocumentState.ERROR, f"repair call failed: {error.cause}", rule_ids(first.report),
                              final_attempt_id=first.attempt_id, tokens=tokens)
        earlier, tokens = first.report, tokens + final.tokens
    if not final.report.passed:  # the judge runs only after every deterministic rule passed
        routed = route(final.report, None, settings, earlier=earlier)
        return Conversion(routed.state, routed.cause, rule_ids(final.report), routed.needs_person,
                          final.attempt_id, tokens)
    judged = await calls.judge(job, final.report)
    if judged is None or not judged.decision.regenerate:
        routed = route(final.report, None if judged is None else judged.decision, settings, earlier=earlier)
        return Conversion(routed.state, routed.cause, rule_ids(final.report), routed.needs_person,
                          final.attempt_id, tokens + (0 if judged is None else judged.tokens))
    return await regenerate(job, calls, request, final, judged, tokens + judged.tokens)


CALL_BOUND = 5
"""Model calls one document may cost in one run: generate, repair, judge, regenerate, judge again."""


async def regenerate(job: Job, calls: ModelCalls, request: GenerationRequest, failed: Answer, judged: JudgeCall,
                     tokens: int) -> Conversion:
    """After a judge fail: one regeneration with the judge's findings and the sentences around every excerpt,
    validated and judged again. What still fails (rules or judge), or cannot be asked, goes to a person."""
    from extractor.judge.regenerate import render_regeneration

    judge = calls.judge_model
    assert judge is not None
    judge.regenerations += 1
    settings = calls.settings
    first_cause = judged.decision.cause or "judge fail"
    regeneration = render_regeneration(judge.rubric, request, failed.result.text, judged.outcome,
                                       judge.policy.threshold, failed.report, job.document)
    try:
        again = await calls.generate(job, regeneration, number=REGENERATE_NUMBER, kind=AttemptKind.generate)
    except ProviderError as error:
        routed = route(failed.report, judged.decision, settings)
        return Conversion(routed.state, f"{routed.cause}; regeneration call failed: {error.cause}",
                          rule_ids(failed.report), routed.needs_person, failed.attempt_id, tokens)
    tokens += again.tokens
    if again.report.critical:  # what the regeneration wrote is blocked like any other candidate
        routed = route(again.report, None, settings)
        return Conversion(routed.state, routed.cause, rule_ids(again.report), routed.needs_person, again.attempt_id,
                          tokens)
    if not again.report.passed:
        routed = route(failed.report, judged.decision, settings)
        return Conversion(DocumentState.MANUAL_REVIEW,
                          f"{first_cause}; the regeneration failed validation: {len(again.report.errors)} error(s)",
                          rule_ids(again.report), routed.needs_person, failed.attempt_id, tokens)
    second = await calls.judge(job, again.report, number=2)
    assert second is not None
    routed = route(again.report, second.decision, settings)
    cause = routed.cause
    if cause is not None:
        twice = second.decision.result is JudgeResult.fail
        cause += " (the judge failed it twice; regenerated once)" if twice else " (after one regeneration)"
    return Conversion(routed.state, cause, rule_ids(again.report), routed.needs_person, again.attempt_id,
                      tokens + second.tokens)
