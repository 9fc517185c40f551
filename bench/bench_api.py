"""``import extractor`` and one ``extractor.validate`` call, against ``extract validate``'s own work in process.

For each sample candidate (``samples/expected/*.candidate.json`` with its source), two new Python processes take
turns ``--rounds`` times:

- the API as a script uses it: the clock starts before ``import extractor`` and stops when
  ``extractor.validate(Path(candidate), source)`` has returned its ``Report`` (pydantic models included);
- the baseline: ``extract validate``'s own work, as its command function does it once the CLI has parsed its
  arguments: the clock starts after ``extractor.cli`` (typer, the command tree) is imported and stops when the report
  is turned into the JSON ``--format json`` prints: the imports its function makes, the contract, the sandboxed
  reader, the candidate file, the validation.

Both read the source through the same sandboxed reader. The medians and the ratio API / baseline are printed
(target <= 1.5x, docs/python-api.md#import-cost), with the CPU time of each process (user + system) beside the wall
time: it leaves out waiting for a core, so its ratio moves less with what else the machine is doing.

    nice -n 10 python bench/bench_api.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5
SAMPLES = (("en_purchase_approval", "en_purchase_approval.md"), ("ko_work_request_review", "ko_work_request_review.txt"),
           ("ru_vacation_approval", "ru_vacation_approval.txt"))

API = """if True:
    import os, sys, time
    started, cpu = time.perf_counter(), os.times()
    from pathlib import Path
    import extractor
    report = extractor.validate(Path(sys.argv[1]), sys.argv[2])
    wall, after = time.perf_counter() - started, os.times()
    assert report.passed, report.findings
    print(wall, after.user + after.system - cpu.user - cpu.system)
"""

CLI = """if True:
    import os, sys, time
    import extractor.cli  # typer and the command tree: the CLI's start, not the command's work
    started, cpu = time.perf_counter(), os.times()
    from pathlib import Path
    from extractor.cli.app import contract_named, load_document
    from extractor.rules.structure import read_candidate
    from extractor.validate import validate
    chosen = contract_named("work_procedure", None)
    document = load_document(Path(sys.argv[2]))
    report = validate(read_candidate(Path(sys.argv[1])), document, chosen)
    printed = __import__("json").dumps(report.to_json(), ensure_ascii=False, indent=2)
    wall, after = time.perf_counter() - started, os.times()
    assert report.passed, report.findings
    print(wall, after.user + after.system - cpu.user - cpu.system)
"""


def measure(code: str, candidate: Path, source: Path) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one new process running ``code``."""
    ran = subprocess.run([sys.executable, "-c", code, str(candidate), str(source)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=False)
    if ran.returncode != 0:
        raise SystemExit(f"failed: {ran.stderr[-2000:]}")
    wall, cpu = ran.stdout.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    rows = []
    for stem, source_name in SAMPLES:
        candidate = ROOT / "samples/expected" / f"{stem}.candidate.json"
        source = ROOT / "samples" / source_name
        api: list[tuple[float, float]] = []
        cli: list[tuple[float, float]] = []
        for _ in range(args.rounds):  # in turns: a busy moment of the shared machine falls on both
            api.append(measure(API, candidate, source))
            cli.append(measure(CLI, candidate, source))
        api_wall, cli_wall = statistics.median(w for w, _ in api), statistics.median(w for w, _ in cli)
        api_cpu, cli_cpu = statistics.median(c for _, c in api), statistics.median(c for _, c in cli)
        rows.append({"sample": stem, "api_s": round(api_wall, 3), "validate_s": round(cli_wall, 3),
                     "ratio": round(api_wall / cli_wall, 2), "api_cpu_s": round(api_cpu, 3),
                     "validate_cpu_s": round(cli_cpu, 3), "cpu_ratio": round(api_cpu / cli_cpu, 2)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"import extractor + extractor.validate vs extract validate's own work ({args.rounds} rounds, medians; "
          f"target <= {TARGET_RATIO}x)")
    print(f"{'sample':<24} {'API s':>7} {'CLI s':>7} {'ratio':>6} {'API cpu':>8} {'CLI cpu':>8} {'ratio':>6}")
    for row in rows:
        print(f"{row['sample']:<24} {row['api_s']:>7.3f} {row['validate_s']:>7.3f} {row['ratio']:>5.2f}x "
              f"{row['api_cpu_s']:>8.3f} {row['validate_cpu_s']:>8.3f} {row['cpu_ratio']:>5.2f}x")
    worst = max(row["ratio"] for row in rows)
    print(f"worst ratio {worst:.2f}x: {'within' if worst <= TARGET_RATIO else 'OVER'} the {TARGET_RATIO}x target")


if __name__ == "__main__":
    main()
