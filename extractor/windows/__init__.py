"""Long documents (docs/runs.md#long-documents): token budgets, sentence-aligned windows, and the deterministic merge.

``tokens`` counts tokens for a provider and holds the budgets; ``plan`` cuts a document into windows of
whole sentences when its prompt or its expected answer exceeds a budget; ``merge`` turns the windows'
partial candidates into one, driven by the contract's ``MergeSpec``. All of it is pure: no I/O, no model. The
per-document procedure for a document that needs more than one window calls the model through the engine, so
it is the engine's (``extractor.engine.windowed``).
"""
