"""The model servers a service may call: named and configured by the operator, never by an API user.

``extract serve`` and every ``extract worker`` read the same file at start (``--endpoints FILE``, else
``EXTRACT_ENDPOINTS``; the format is in docs/service.md). Each endpoint has a name, the URL of an
OpenAI-compatible server, the environment variable that holds its key (never the key itself) and the models
it may be asked for. The API chooses among those names and models only (``Endpoints.allowed``), and a batch
carries only the name: each worker looks it up in its own configuration, so a key is only ever sent to the
URL the operator wrote beside it.

Without a file there is one endpoint, ``default``: ``OPENAI_BASE_URL`` (else OpenAI) with ``OPENAI_API_KEY``,
and through the API only the model the service was started with (``--model``/``EXTRACT_MODEL``; a local model
there is the operator's choice). A batch without an endpoint name (``extract run --queue``) is sent to its
base URL, or the worker's ``OPENAI_BASE_URL``, with the key of the configured endpoint at that URL if there
is one, and with no key otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.errors import InputError, UsageError

ENDPOINTS_ENV = "EXTRACT_ENDPOINTS"
DEFAULT_ENDPOINT = "default"
OPENAI_URL = "https://api.openai.com/v1"


def normal_url(url: str) -> str:
    """A base URL as compared: without trailing slashes."""
    return url.strip().rstrip("/")


@dataclass(frozen=True)
class Endpoint:
    """One model server: ``url`` None is an in-process local model (only as the service's own default)."""

    name: str
    url: str | None
    key_env: str | None
    models: tuple[str, ...] | None
    """Provider strings it may be asked for (``openai:<model>``); None: any (a worker without a file)."""

    def key(self) -> str | None:
        """The key, read from this process's environment when a provider is made (a rotated key is used at once)."""
        if self.key_env is None:
            return None
        value = os.environ.get(self.key_env, "").strip()
        if not value:
            raise ValueError(f"endpoint {self.name!r} needs its key in {self.key_env}, which is not set here")
        return value

    def to_json(self) -> dict[str, Any]:
        """What API users see: the name and the models, neither the URL nor anything about the key."""
        return {"name": self.name, "models": list(self.models or ())}


@dataclass(frozen=True)
class Endpoints:
    """The endpoints of this process, by name; ``source`` says where they came from (for messages)."""

    by_name: dict[str, Endpoint]
    source: str

    def get(self, name: str) -> Endpoint:
        """The endpoint called ``name``; ``ValueError`` naming the configured ones otherwise."""
        found = self.by_name.get(name)
        if found is None:
            raise ValueError(f"no endpoint {name!r} is configured here ({self.source}); configured: "
                             f"{', '.join(sorted(self.by_name)) or 'none'}")
        return found

    def allowed(self, name: str, model: str) -> Endpoint:
        """The endpoint, if ``model`` is one it may be asked for; ``ValueError`` saying what is allowed."""
        endpoint = self.get(name)
        if endpoint.models is not None and model not in endpoint.models:
            raise ValueError(f"model {model!r} is not configured for endpoint {name!r}; its models: "
                             f"{', '.join(endpoint.models)}")
        return endpoint

    def at_url(self, url: str) -> Endpoint | None:
        """The configured endpoint serving ``url``, whose key may go there."""
        wanted = normal_url(url)
        return next((e for e in self.by_name.values() if e.url is not None and normal_url(e.url) == wanted), None)

    def first_model(self) -> str | None:
        """The first model of the first endpoint: what a service started without ``--model`` submits with."""
        return next((m for e in self.by_name.values() for m in e.models or ()), None)

    def first_with(self, model: str) -> Endpoint | None:
        return next((e for e in self.by_name.values() if e.models is None or model in e.models), None)


def load_endpoints(path: str | Path | None = None, *, default_model: str | None = None) -> Endpoints:
    """The endpoints from ``path`` (else ``EXTRACT_ENDPOINTS``); without a file, the ``default`` endpoint of
    this process's environment, allowing ``default_model`` only (any model when None: a worker). A broken
    file is a ``UsageError`` naming the file and the key (``extractor.configfile.EndpointsFile`` is its shape)."""
    path = path or os.environ.get(ENDPOINTS_ENV) or None
    if path is None:
        local = default_model is not None and default_model.strip().partition(":")[0] == "local"
        url = None if local else normal_url(os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
        models = None if default_model is None else (default_model,)
        return Endpoints({DEFAULT_ENDPOINT: Endpoint(DEFAULT_ENDPOINT, url, None if local else "OPENAI_API_KEY",
                                                     models)}, "OPENAI_BASE_URL and OPENAI_API_KEY")
    from extractor.configfile import EndpointsFile, read_toml

    try:
        config = read_toml(path, EndpointsFile, "endpoints file")
    except InputError as error:
        raise UsageError(str(error)) from None
    return Endpoints({name: Endpoint(name, normal_url(entry.url), entry.key_env,
                                     tuple(m if m.startswith("openai:") else f"openai:{m}" for m in entry.models))
                      for name, entry in config.endpoints.items()}, str(path))
