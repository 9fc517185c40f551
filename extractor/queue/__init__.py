"""Documents on Celery workers: ``extract run --queue``, ``extract worker`` and ``extract serve``'s submissions.

- ``settings``: what a batch is converted with, stored on the batch and rebuilt by every worker;
- ``submit``: the submitting side of ``extract run --queue``: bounded pending documents, following the batch;
- ``celery_app``: the Celery app, its one task and its delivery settings (late acks, visibility timeout);
- ``runner``: one asyncio loop per worker process converting queued documents through the batch engine;
- ``limiter``: a 429 seen by one worker slows every worker (shared through Redis);
- ``uploads``: submitted bytes live in the run log; a scratch copy when a reader needs a file.

Exactly once is the run log's job (``extractor.store.tasks`` and ``extractor.store.claims``), not the broker's.
"""
