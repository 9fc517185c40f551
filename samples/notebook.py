# %% [markdown]
# # The samples, from Python
#
# A notebook in the percent format (Jupyter, VS Code and Jupytext open it cell by cell; `python samples/notebook.py`
# runs it whole, from the project's folder). It converts the three sample procedures, shows every finding in one
# table, approves one record and exports the approved records: what README sections 1-4 do with `extract`, through
# `import extractor` (docs/python-api.md). With the bundled demonstration model every document ends MANUAL_REVIEW
# (its guesses fail the rules); set `EXTRACT_MODEL`, or `OPENAI_API_KEY`, for a real model.

# %%
from pathlib import Path

import extractor

SAMPLES = Path("samples")
EXPECTED = SAMPLES / "expected"

# %% [markdown]
# ## Convert the samples
#
# One run, as `extract run samples/*.md samples/*.txt`, into the same run log (`extract.db` here).

# %%
print("converting the samples")
batch = extractor.extract_many([SAMPLES / "en_purchase_approval.md", SAMPLES / "ko_work_request_review.txt",
                                SAMPLES / "ru_vacation_approval.txt"])
print(f"run {batch.run_id}: {batch.outcome.value} {batch.counts}")
for note in batch.notes:
    print(note)

# %% [markdown]
# ## Every finding, one row each
#
# The final attempt's findings per document (`extract rules RULE_ID` explains a rule). With pandas installed,
# `pandas.DataFrame(rows)` shows the same table.

# %%
rows = [{"rule_id": finding.rule_id, "severity": finding.severity.value, "document": Path(result.path).name,
         "location": finding.location, "message": finding.message}
        for result in batch.results for finding in result.findings]
columns = ("rule_id", "severity", "document", "location")
widths = {column: max([len(column), *(len(str(row[column])) for row in rows)]) for column in columns}
print("  ".join(column.ljust(widths[column]) for column in columns) + "  message")
for row in rows:
    print("  ".join(str(row[column]).ljust(widths[column]) for column in columns) + "  " + row["message"][:80])
print(f"{len(rows)} finding(s) in {len(batch.results)} document(s)")

# %% [markdown]
# ## Approve one record
#
# A READY_FOR_REVIEW candidate is approved as it is; a MANUAL_REVIEW one only with a corrected candidate, here the
# sample's expected record, validated against the same source before it is stored (README section 3).

# %%
chosen = next((r for r in batch.results if r.state == "READY_FOR_REVIEW"), batch.results[0])
corrected = None
if chosen.state != "READY_FOR_REVIEW":
    corrected = Path(EXPECTED / f"{Path(chosen.path).stem}.candidate.json")
decision = extractor.approve(chosen, reviewer="notebook", note="approved from samples/notebook.py", edited=corrected)
print(f"{decision['outcome']}: {chosen.path} (edited: {decision['edited']})")

# %% [markdown]
# ## Export what a person approved

# %%
written = extractor.export_records("approved.jsonl")
print(f"exported {written} approved record(s) to approved.jsonl")
