"""Review in the browser: server-rendered pages (Jinja2, a little plain JavaScript, no build step, no CDN).

- ``router.review_router(open_stores, current_principal)``: the queue, document, approve/reject/edit pages
  as a FastAPI router that any app mounts with its own login (the principal is a dependency);
- ``local``: ``extract review --web``, the router for one local user behind a one-time login token;
- ``sessions``: the session cookie both logins share (this one, and ``extract serve``'s token login in
  ``extractor.service.browser``, which serves the same pages to a team under ``/review``);
- ``page`` and ``schemaform``: what the templates draw, built from ``extractor.review``'s data and the
  contract's JSON Schema.

Templates and static files live in this package (``templates/``, ``static/``), so a wheel or an editable
install serves them without network access.
"""
