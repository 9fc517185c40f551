"""Where the files that ship with the package live: contracts, prompts and migrations.

Inside an installed wheel they are ``extractor/_data/<kind>``; in a source checkout, ``<kind>/`` at the
project root. Standard library only: the run log, the prompts and the contracts all read from here.
"""

from __future__ import annotations

from pathlib import Path


def data_dir(kind: str) -> Path:
    """Where ``contracts``, ``prompts`` or ``migrations`` live: inside the wheel, else the source tree."""
    packaged = Path(__file__).resolve().parent / "_data" / kind
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[1] / kind
