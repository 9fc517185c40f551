"""What a worker process's collector holds, counted in that process. Its own module imports nothing but ``gc``,
so asking a worker for it adds no module (and none of their objects) to what it counts."""

from __future__ import annotations

import gc


def heap_counts() -> tuple[int, int]:
    """In the process that runs it: (objects frozen, objects a full collection walks)."""
    return gc.get_freeze_count(), len(gc.get_objects())
