"""Prompt tokens per first request of the bundled samples, with the JSON Schema in the prompt and without it (the
modes that carry the schema in the request: ``json_schema``, ``tools``, a local grammar), counted with the
bundled model's own tokenizer (the GGUF vocabulary), and the share saved.

    python bench/bench_prompt_tokens.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from extractor.contracts import get_contract, use_dirs
    from extractor.generate.prompt import load_prompt, render_request
    from extractor.ingest import load
    from extractor.providers import from_string
    from extractor.segment import segment
    from extractor.windows.tokens import counter_for

    use_dirs([ROOT / "samples/contracts"])
    counter = counter_for(from_string("local"))
    samples = {"work_procedure": sorted(p for p in (ROOT / "samples").iterdir() if p.suffix in (".md", ".txt")),
               "purchase_order": sorted((ROOT / "samples/purchase_orders").iterdir())}
    total_with = total_without = 0
    print(f"tokenizer {counter.name}")
    for name, paths in samples.items():
        contract = get_contract(name)
        prompt = load_prompt(contract)
        for path in paths:
            request = render_request(prompt, contract, segment(load(path)))
            with_schema = sum(counter.count(m["content"]) for m in request.messages_for("json_object"))
            without = sum(counter.count(m["content"]) for m in request.messages_for("json_schema"))
            total_with += with_schema
            total_without += without
            print(f"{name:15} {path.name:28} {with_schema:6} -> {without:6} tokens "
                  f"({(with_schema - without) / with_schema:.0%} fewer)")
    print(f"all samples: {total_with:,} -> {total_without:,} prompt tokens, "
          f"{total_with - total_without:,} ({(total_with - total_without) / total_with:.0%}) fewer per first request")


if __name__ == "__main__":
    main()
