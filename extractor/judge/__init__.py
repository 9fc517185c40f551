"""The optional judge stage (a second model checks that each excerpt supports its value) and its calibration.

``verdict`` parses the judge's strict JSON or refuses it as a protocol error; ``stage`` builds the one
request per document and calls the provider; ``modes`` decides what an answer may do (observe / review /
block, block only with an admitting calibration on record); ``calibration`` measures a judge against two
human annotators (what it found is an ``extractor.calibration_report``, below the store, which reads reports
back); ``labels`` reads the labels CSV; ``calibrate_rule`` measures a lexical-support rule's score the same way
and fits its threshold. Nothing here is imported unless a judge is used or calibrated. Judging a finished run
afterwards routes documents as the engine does, so it is the engine's (``extractor.engine.judge_afterwards``).
"""
