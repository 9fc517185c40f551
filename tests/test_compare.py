"""Run-log queries (``runs``, ``stats``) and the regression gate (``compare``).

The gate's numbers are checked against scipy (Beta quantiles, and rho by numerical integration); the
commands run on runs produced through the real pipeline against the scripted HTTP server, and the exit
codes CI gates on are checked through a real ``python -m extractor compare`` subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats
from typer.testing import CliRunner

from extractor.cli import app
from extractor.compare import compare
from extractor.gate import (
    Category,
    GateSettings,
    Posterior,
    beta_cdf,
    beta_ppf,
    decide_release,
    normalise_weights,
    rho,
)
from extractor.runfilter import RunFilter, parse_when
from extractor.store import open_store
from extractor.vocab import GateDecision
from tests.support.corpus import run, script, write_documents
from tests.support.databases import fresh_database
from tests.support.llm_server import ScriptedLLMServer

# ---------------------------------------------------------------- gate math against scipy

COUNTS = [(0, 0), (0, 1), (1, 1), (3, 10), (9, 10), (0, 50), (50, 50), (17, 40), (480, 500), (2, 1000)]


@pytest.mark.parametrize(("passed", "n"), COUNTS)
def test_posterior_interval_is_the_exact_beta_quantile(passed: int, n: int) -> None:
    posterior = Posterior(passed, n)
    low, high = posterior.interval
    a, b = 1 + passed, 1 + n - passed
    assert low == pytest.approx(stats.beta.ppf(0.025, a, b), abs=1e-9)
    assert high == pytest.approx(stats.beta.ppf(0.975, a, b), abs=1e-9)
    assert posterior.mean == pytest.approx(stats.beta.mean(a, b), abs=1e-12)
    for x in (0.001, 0.3, 0.5, 0.97):
        assert beta_cdf(x, a, b) == pytest.approx(stats.beta.cdf(x, a, b), abs=1e-10)
    assert beta_ppf(0.5, a, b) == pytest.approx(stats.beta.median(a, b), abs=1e-9)


def exact_rho(category: Category, delta: float) -> float:
    """P(theta_B < theta_A - delta) = integral of f_A(x) * F_B(x - delta) dx, for one category."""
    a, b = category.a, category.b
    value, _ = integrate.quad(lambda x: stats.beta.pdf(x, a.a, a.b) * stats.beta.cdf(x - delta, b.a, b.b), delta, 1,
                              limit=200)
    return value


@pytest.mark.parametrize(("counts", "delta"), [
    ((10, 10, 10, 10), 0.03), ((10, 10, 9, 10), 0.03), ((10, 10, 4, 10), 0.03), ((45, 50, 40, 50), 0.03),
    ((80, 100, 85, 100), 0.0), ((30, 40, 20, 40), 0.1), ((5, 6, 5, 6), 0.03),
])
def test_rho_matches_numerical_integration(counts: tuple[int, int, int, int], delta: float) -> None:
    category = Category("all", *counts, weight=1.0)
    estimate = rho([category], GateSettings(delta=delta))
    exact = exact_rho(category, delta)
    # 10,000 samples: standard error <= 0.005; 4 standard errors
    assert estimate == pytest.approx(exact, abs=4 * np.sqrt(exact * (1 - exact) / 10_000) + 1e-3)


def test_weighted_rho_matches_an_independent_monte_carlo() -> None:
    categories = [Category("hr", 18, 20, 15, 20, 0.7), Category("finance", 9, 10, 10, 10, 0.3)]
    estimate = rho(categories, GateSettings(delta=0.03))
    draws = 400_000
    rng = np.random.default_rng(7)
    rate_a = sum(c.weight * stats.beta.rvs(c.a.a, c.a.b, size=draws, random_state=rng) for c in categories)
    rate_b = sum(c.weight * stats.beta.rvs(c.b.a, c.b.b, size=draws, random_state=rng) for c in categories)
    reference = float(np.mean(rate_b < rate_a - 0.03))
    assert estimate == pytest.approx(reference, abs=0.02)


def test_same_inputs_and_seed_give_the_same_rho() -> None:
    categories = [Category("a", 30, 40, 25, 40, 0.5), Category("b", 8, 10, 6, 10, 0.5)]
    first = decide_release(categories, GateSettings(seed=42))
    again = decide_release(categories, GateSettings(seed=42))
    assert first.rho == again.rho and first.to_json() == again.to_json()
    other = decide_release(categories, GateSettings(seed=43))
    assert other.rho != first.rho and other.rho == pytest.approx(first.rho, abs=0.03)
    assert decide_release(categories, GateSettings(seed=42, samples=2_000)).rho != first.rho


def test_decision_thresholds_and_not_evaluable() -> None:
    one = [Category("all", 10, 10, 9, 10, 1.0)]  # rho ~ 0.67
    assert decide_release(one).decision is GateDecision.MANUAL_REVIEW
    assert decide_release(one, GateSettings(block=0.6)).decision is GateDecision.BLOCK
    assert decide_release(one, GateSettings(review=0.7, block=0.9)).decision is GateDecision.PROMOTE
    assert decide_release([Category("all", 10, 10, 10, 10, 1.0)]).decision is GateDecision.PROMOTE
    assert decide_release([Category("all", 10, 10, 2, 10, 1.0)]).decision is GateDecision.BLOCK
    empty = decide_release([])
    assert empty.decision is GateDecision.NOT_EVALUABLE and empty.rho is None and empty.exit_code == 4
    assert "no evaluable document" in empty.reason
    with pytest.raises(ValueError):
        GateSettings(review=0.9, block=0.8)
    with pytest.raises(ValueError, match="no weight"):
        normalise_weights({"hr": 1.0}, ["hr", "finance"])
    with pytest.raises(ValueError, match="no evaluable"):
        normalise_weights({"hr": 1.0, "legal": 1.0}, ["hr"])
    assert normalise_weights({"hr": 3, "finance": 1}, ["finance", "hr"]) == {"finance": 0.25, "hr": 0.75}


def test_run_filters_and_times_parse_like_people_type_them() -> None:
    assert RunFilter.parse("prompt=v2,model=gpt-4o-mini") == RunFilter(prompt_version="v2", model="gpt-4o-mini")
    assert RunFilter.parse("4F1a2b3c").run == "4f1a2b3c"
    assert RunFilter.parse("since=2026-05-01").since.isoformat() == "2026-05-01T00:00:00+00:00"
    for bad in ("prompt", "colour=red", "prompt=v1,prompt=v2", "not-a-run", "since=yesterday"):
        with pytest.raises(ValueError):
            RunFilter.parse(bad)
    assert parse_when("2026-05-01T12:00+02:00").hour == 10


# ---------------------------------------------------------------- the commands on real runs

DOCS = range(10)
PLANS: dict[str, Callable[[int], str]] = {
    "base": lambda n: "pass",
    "worse": lambda n: "fail" if n < 6 else "pass",  # 4/10: BLOCK
    "same": lambda n: "pass",  # 10/10 vs 10/10: rho ~ 0.35, PROMOTE
    "slightly": lambda n: "fail" if n == 0 else "repaired" if n == 1 else "pass",  # 9/10: rho ~ 0.67, MANUAL_REVIEW
    "down": lambda n: "error",  # nothing evaluable: NOT_EVALUABLE
    "flaky": lambda n: "error" if n == 9 else "pass",  # one ERROR among ten
}


@dataclass
class Runs:
    db_url: str
    folder: Path
    ids: dict[str, list[str]]

    def cli(self, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--database", self.db_url], env={"COLUMNS": "200"},
                                  catch_exceptions=False)

    def json(self, *args: str, code: int = 0) -> Any:
        result = self.cli(*args, "--format", "json")
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Baseline ``base`` in two runs (tags hr: docs 0-4, finance: docs 5-9, plus doc 11 only here), and one
    run per candidate model (``worse`` also has doc 10, which the baseline lacks).

    Built once per backend for this module (the tests below only read it), on a fresh SQLite file or a
    fresh PostgreSQL database exactly like the ``db_url`` fixture.
    """
    folder = tmp_path_factory.mktemp("runs")
    with fresh_database(request.param, folder) as db_url, ScriptedLLMServer(script(PLANS)) as server:
        paths = write_documents(folder / "docs", [*DOCS, 10, 11])
        ids: dict[str, list[str]] = {}
        ids["base"] = [run(db_url, server, [*paths[:5], paths[11]], "base", tags=["hr"]).run_id,
                       run(db_url, server, paths[5:10], "base", tags=["finance"]).run_id]
        for model in ("worse", "same", "slightly", "down", "flaky"):
            chosen = paths[:11] if model == "worse" else paths[:10]
            ids[model] = [run(db_url, server, chosen, model).run_id]
        yield Runs(db_url, folder, ids)


def test_runs_lists_and_filters(runs: Runs) -> None:
    listed = runs.json("runs")
    assert len(listed) == 7 and listed[0]["id"] == runs.ids["flaky"][0]  # newest first
    assert [r["model"] for r in listed][-2:] == ["base", "base"]
    worse = runs.json("runs", "--model", "worse")
    assert [r["id"] for r in worse] == runs.ids["worse"]
    assert worse[0]["counts"] == {"MANUAL_REVIEW": 6, "READY_FOR_REVIEW": 5} and worse[0]["documents"] == 11
    assert worse[0]["prompt_version"] == "v1" and worse[0]["validator_version"] and worse[0]["config"]["concurrency"] == 4
    assert runs.json("runs", "--model", "down")[0]["counts"] == {"ERROR": 10}
    assert len(runs.json("runs", "--prompt", "v1", "--contract", "work_procedure")) == 7
    assert runs.json("runs", "--prompt-version", "v2") == [] and runs.json("runs", "--contract", "rag_answer") == []
    assert runs.json("runs", "--since", "2999-01-01") == [] and len(runs.json("runs", "--since", "1h")) == 7
    assert runs.json("runs", "--until", "2000-01-01") == [] and len(runs.json("runs", "--limit", "2")) == 2
    assert runs.cli("runs", "--since", "someday").exit_code == 2
    text = runs.cli("runs", "--model", "worse")
    assert text.exit_code == 0 and runs.ids["worse"][0][:12] in text.stdout


def test_stats_gives_failure_rates_per_rule_per_run(runs: Runs) -> None:
    result = runs.json("stats", "model=base", "model=worse", "model=slightly")
    by_model = {entry["model"]: entry for entry in result}
    assert {entry["run_id"] for entry in result} == {*runs.ids["base"], *runs.ids["worse"], *runs.ids["slightly"]}
    worse = by_model["worse"]
    assert (worse["documents"], worse["evaluated_final"], worse["evaluated_first"]) == (11, 11, 11)
    rule = worse["rules"]["VALUE_WITHOUT_EVIDENCE"]
    assert rule["final"] == {"failed": 6, "evaluated": 11, "rate": pytest.approx(6 / 11)}
    assert rule["first"]["failed"] == 6
    slightly = by_model["slightly"]["rules"]["VALUE_WITHOUT_EVIDENCE"]
    assert slightly["final"]["failed"] == 1 and slightly["first"]["failed"] == 2  # doc 1 was repaired
    assert all(entry["rules"] == {} for entry in result if entry["model"] == "base")
    down = runs.json("stats", runs.ids["down"][0][:8])
    assert down[0]["evaluated_final"] == 0 and down[0]["evaluated_first"] == 0 and down[0]["documents"] == 10
    assert [e["run_id"] for e in runs.json("stats", "--model", "base")] == list(reversed(runs.ids["base"]))
    only = runs.json("stats", "model=worse", "--rule", "value_without_evidence")
    assert list(only[0]["rules"]) == ["VALUE_WITHOUT_EVIDENCE"]
    text = runs.cli("stats", "model=base", "model=worse")
    assert text.exit_code == 0 and "VALUE_WITHOUT_EVIDENCE" in text.stdout and "6/11 55%" in text.stdout
    assert runs.cli("stats", "model=nothing").exit_code == 2


def extract(runs: Runs, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EXTRACT_DATABASE_URL": runs.db_url, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "extractor", "compare", *args], capture_output=True, text=True,
                          env=env, cwd=runs.folder, timeout=120)


def test_compare_exit_codes_through_the_real_cli(runs: Runs) -> None:
    block = extract(runs, "model=base", "model=worse", "--format", "json")
    assert block.returncode == 1, block.stderr
    report = json.loads(block.stdout)
    assert report["decision"] == "BLOCK" and report["rho"] >= 0.8
    [category] = report["categories"]
    assert (category["a"]["passed"], category["a"]["n"], category["b"]["passed"], category["b"]["n"]) == (10, 10, 4, 10)
    assert category["a"]["interval"] == pytest.approx(list(stats.beta.ppf([0.025, 0.975], 11, 1)), abs=1e-9)
    assert category["b"]["interval"] == pytest.approx(list(stats.beta.ppf([0.025, 0.975], 5, 7)), abs=1e-9)
    assert report["rho"] == pytest.approx(exact_rho(Category("all", 10, 10, 4, 10, 1.0), 0.03), abs=0.02)
    regressions = {Path(r["path"]).name: r["new_rule_ids"] for r in report["regressions"]}
    assert regressions == {f"purchase_{n:02d}.md": ["VALUE_WITHOUT_EVIDENCE"] for n in range(6)}
    assert [Path(d["path"]).name for d in report["unmatched"]["baseline_only"]] == ["purchase_11.md"]
    assert [Path(d["path"]).name for d in report["unmatched"]["candidate_only"]] == ["purchase_10.md"]
    assert report["rule_rates"][0] == {**report["rule_rates"][0], "rule_id": "VALUE_WITHOUT_EVIDENCE",
                                       "baseline_failed": 0, "candidate_failed": 6}

    promote = extract(runs, "model=base", runs.ids["same"][0])
    assert promote.returncode == 0, promote.stderr
    assert "decision: PROMOTE" in promote.stdout and "1 document(s) baseline only" in promote.stdout
    review = extract(runs, "model=base", "model=slightly")
    assert review.returncode == 3, review.stderr
    assert "decision: MANUAL_REVIEW" in review.stdout and "VALUE_WITHOUT_EVIDENCE" in review.stdout
    down = extract(runs, "model=base", "model=down")
    assert down.returncode == 4, down.stderr
    assert "decision: NOT_EVALUABLE" in down.stdout and "no evaluable document on the candidate side (ERROR 10)" in down.stdout
    bad = runs.cli("compare", "model=base", "colour=blue")
    assert bad.exit_code == 2 and "unknown filter" in bad.stderr and bad.stderr.count("\n") == 1


def test_compare_details(runs: Runs) -> None:
    # the same counts and seed give the same rho; the thresholds and delta are settable
    first = runs.json("compare", "model=base", "model=slightly", code=3)
    assert runs.json("compare", "model=base", "model=slightly", code=3)["rho"] == first["rho"]
    assert first["rho"] == pytest.approx(exact_rho(Category("all", 10, 10, 9, 10, 1.0), 0.03), abs=0.02)
    assert runs.json("compare", "model=base", "model=slightly", "--review", "0.7", "--block", "0.9")["decision"] == "PROMOTE"
    assert runs.json("compare", "model=base", "model=slightly", "--block", "0.6", code=1)["decision"] == "BLOCK"
    assert runs.json("compare", "model=base", "model=slightly", "--seed", "7", code=3)["rho"] != first["rho"]
    [regression] = first["regressions"]
    assert Path(regression["path"]).name == "purchase_00.md" and regression["new_rule_ids"] == ["VALUE_WITHOUT_EVIDENCE"]

    # a provider ERROR is not evaluable: left out of both rates, listed, and PROMOTE becomes MANUAL_REVIEW
    flaky = runs.json("compare", "model=base", "model=flaky", code=3)
    assert flaky["compared"] == 9 and flaky["matched"] == 10
    assert flaky["categories"][0]["b"]["n"] == 9 and flaky["categories"][0]["b"]["passed"] == 9
    assert [Path(d["path"]).name for d in flaky["not_evaluable"]] == ["purchase_09.md"]
    assert "not evaluable" in flaky["reason"]
    assert runs.json("compare", "model=base", "model=flaky", "--max-unevaluable", "0.1")["decision"] == "PROMOTE"

    # categories from the tags given to `extract run`, weighted by traffic shares
    tagged = runs.json("compare", "model=base", "model=worse", "--by-tag", code=1)
    counts = {c["name"]: (c["a"]["passed"], c["a"]["n"], c["b"]["passed"], c["b"]["n"], c["weight"])
              for c in tagged["categories"]}
    assert counts == {"finance": (5, 5, 4, 5, 0.5), "hr": (5, 5, 0, 5, 0.5)}
    shares = runs.json("compare", "model=base", "model=worse", "--weights", "hr=1,finance=9", code=1)
    assert {c["name"]: c["weight"] for c in shares["categories"]} == {"finance": 0.9, "hr": 0.1}
    assert shares["rho"] < tagged["rho"]  # most traffic is in finance, which barely regressed
    assert runs.cli("compare", "model=base", "model=worse", "--weights", "hr=1").exit_code == 2

    # a run id on one side; the two sides must differ; an optional picture of the posteriors
    plot = runs.folder / "plots" / "gate.png"
    same = runs.cli("compare", runs.ids["worse"][0], "model=worse")
    assert same.exit_code == 2 and "same runs" in same.stderr
    drawn = runs.cli("compare", "model=base", runs.ids["worse"][0][:10], "--by-tag", "--plot", str(plot))
    assert drawn.exit_code == 1 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open_store(runs.db_url) as store:
        result = compare(store, "model=base", "model=down", GateSettings())
    assert result.decision is GateDecision.NOT_EVALUABLE and result.exit_code == 4
