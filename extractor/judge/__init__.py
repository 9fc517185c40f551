"""The optional judge stage (a second model checks that each excerpt supports its value) and its calibration.

``verdict`` parses the judge's strict JSON or refuses it as a protocol error; ``stage`` builds the one
request per document and calls the provider; ``modes`` decides what an answer may do (observe / review /
block, block only with an admitting calibration on record); ``calibration`` measures a judge against two
human annotators and ``report`` holds what it found; ``labels`` reads the labels CSV. Nothing here is imported
unless a judge is used, except ``report`` (standard library only), with which the store reads reports back.
"""
