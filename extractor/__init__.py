"""extractor: documents in, evidence-checked structured candidates out; only people approve."""

__version__ = "0.1.0"
