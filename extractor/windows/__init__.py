"""Long documents (docs/runs.md#long-documents): token budgets, sentence-aligned windows, and the deterministic merge.

``tokens`` counts tokens for a provider and holds the budgets; ``plan`` cuts a document into windows of
whole sentences when its prompt or its expected answer exceeds a budget; ``merge`` turns the windows'
partial candidates into one, driven by the contract's ``MergeSpec``; ``convert`` is the per-document
procedure the engine runs for a document that needs more than one window. Everything but ``convert`` is
pure: no I/O, no model.
"""
