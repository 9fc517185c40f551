"""Everything printed for people (rich tables, panels, progress), in one package.

The CLI hands each command's data here and ``--format json`` prints the same data without it. Modules:
``run`` (validation reports, run progress and summaries), ``review`` (review queue, show, runs, stats,
compare), ``judge`` (calibration reports and the sweep plot), ``documents`` (split sentences, the rule
catalogue). Nothing here decides anything: it only lays out what the stages computed.
"""
