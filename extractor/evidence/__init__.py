"""What every stage says about evidence, below the rules and the validator so imports go one way.

``report`` (findings, field and sentence states, evidence spans, the links a judge checks), ``fieldpath``
(the 0-based path grammar), ``text`` (the declared normalisations and exact matching with spans mapped back)
and ``source`` (a document's matching indexes, built once). Nothing here imports a rule, a contract or a
stage: ``rules``, ``contracts``, ``validate``, ``repair`` and ``judge`` build on it.
"""
