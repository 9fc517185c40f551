"""Accuracy against gold records (docs/design.md#evaluation): gold sets (``gold``), how values compare
(``values``), list alignment and per-document counts (``align``), precision/recall/F1 with bootstrap intervals
and the paired tests (``metrics``), and ``extract eval`` over a selection of runs (``evaluate``)."""
