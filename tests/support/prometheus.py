"""A real Prometheus server (Debian's ``prometheus``) scraping a test's processes every second, and promtool.

The test asks it what a dashboard panel would (``query``): the expressions of ``docs/grafana-dashboard.json`` are
evaluated by the same engine Grafana sends them to. Skipped, saying why, when the binaries are not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.redis_server import free_port


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install -y --no-install-recommends prometheus)")
    return found


def promtool_problems(exposition: str) -> str:
    """What ``promtool check metrics`` finds wrong in a metrics text ("" when nothing)."""
    done = subprocess.run([binary("promtool"), "check", "metrics"], input=exposition, capture_output=True, text=True,
                          timeout=60)
    return (done.stdout + done.stderr).strip() if done.returncode else ""


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) ``expression`` evaluates to now; an error fails the test with Prometheus'
        own message."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=30).json()
        assert answer["status"] == "success", f"{expression}: {answer.get('error')}"
        result = answer["data"]["result"]
        return result if isinstance(result, list) else [{"metric": {}, "value": result}]

    def value(self, expression: str) -> float | None:
        """The one number ``expression`` gives now (None when it gives no series)."""
        result = self.query(expression)
        assert len(result) <= 1, f"{expression}: {len(result)} series"
        return float(result[0]["value"][1]) if result else None


@contextmanager
def prometheus(folder: Path, targets: Sequence[str], timeout: float = 60) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (``host:port``, each serving ``/metrics``) every second, with its data in
    ``folder``; stopped afterwards."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                  "scrape_configs": [{"job_name": "extract", "static_configs": [{"targets": list(targets)}]}]}),
                      encoding="utf-8")
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen([binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                               stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, (folder / "prometheus.log").read_text(errors="replace")
            try:
                if httpx.get(f"{server.url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
