"""A local run's stderr carries what a person needs, not llama.cpp's warnings.

The bundled model is loaded for real (its tokenizer alone, then the whole model) in a fresh process, the way
``extract run`` loads it; llama.cpp printed ``n_ctx_seq (512) > n_ctx_train (0)`` and a note on its SWA cache
there on every run. What goes wrong still shows: a file that is not a model fails with its name on stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.extras import needs_local_extra

LOAD = """
from pathlib import Path
import sys
from extractor.providers.local import LocalProvider
provider = LocalProvider(None if len(sys.argv) < 2 else Path(sys.argv[1]))
print(provider.token_counter().count("The manager approves the request."))
provider._load()
print("loaded")
"""


def load(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LOAD, *args], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])


@needs_local_extra
def test_loading_the_bundled_model_prints_no_llama_cpp_warnings() -> None:
    result = load()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "loaded" and int(result.stdout.split()[0]) > 3
    assert "n_ctx_seq" not in result.stderr and "llama_kv_cache" not in result.stderr, result.stderr
    assert result.stderr.strip() == "", result.stderr


@needs_local_extra
def test_llama_cpp_errors_still_reach_stderr(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    result = load(str(broken))
    assert result.returncode != 0
    assert "broken.gguf" in result.stderr, result.stderr
