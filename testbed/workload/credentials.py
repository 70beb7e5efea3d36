"""Broker credentials of Locust processes, kept out of the run directory.

The worker configuration in the run directory (``worker-config.r<N>.json``) names the broker
endpoints with the password masked. A Locust process gets the password from, in this order:

1. ``$MQBED_RUN_SECRETS``: a mode-0600 file outside the run directory (under the testbed home,
   ``<home>/runs/<run_id>/``) that `mqbed run` writes for its own Locust processes and removes
   when the replication ends — also on errors and interrupts; `mqbed down` removes what a
   killed run left;
2. ``$MQBED_BROKER_URLS`` of its own environment (compose's ``locust-worker`` service): the URL
   whose endpoint has the same name (``external-rabbitmq0``, ...), else the first of the kind.
"""

from __future__ import annotations

__all__ = ["ENV_SECRETS", "fill_credentials", "split_credentials", "write_secrets"]

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.core.atomic import atomic_write_text
from testbed.core.redact import MASK, redact_url

ENV_SECRETS = "MQBED_RUN_SECRETS"
SIDES = ("endpoint", "consumer_endpoint")
"""Fields of a worker configuration that hold a `BrokerEndpoint.to_json()`."""


def split_credentials(doc: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`doc` with every endpoint's password masked, the credentials per endpoint field)."""
    public = dict(doc)
    secrets: dict[str, Any] = {}
    for side in SIDES:
        ep = doc.get(side)
        if isinstance(ep, dict) and ep.get("password"):
            secrets[side] = {"username": ep.get("username"), "password": ep["password"]}
            urls = {k: redact_url(v) for k, v in ep.items() if k.endswith("_url") and v}
            public[side] = {**ep, **urls, "password": MASK}
    return public, secrets


def write_secrets(path: Path, secrets: Mapping[str, Any]) -> None:
    """Write `secrets` to `path`, mode 0600 from creation on (its directory 0700).

    Atomic: a run rewrites it when t=0 is fixed while its Locust processes may be reading it;
    removing it first left a moment in which a user starting then found no file and failed its
    run."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(secrets), mode=0o600)


def _from_urls(doc: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    from testbed.backends.external import parse_broker_urls, urls_from_env

    urls = urls_from_env(dict(environ))
    endpoints = parse_broker_urls(urls, source="$MQBED_BROKER_URLS") if urls else []
    found: dict[str, Any] = {}
    for side in SIDES:
        ep = doc.get(side)
        if not isinstance(ep, dict) or ep.get("password") != MASK:
            continue
        same = [e for e in endpoints if e.name == ep.get("name")] or [
            e for e in endpoints if e.kind == ep.get("kind")
        ]
        if same:
            found[side] = {"username": same[0].username, "password": same[0].password}
    return found


def fill_credentials(doc: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """`doc` (a worker configuration) with the masked passwords filled in; `RuntimeError`
    naming both sources when a masked one stays unknown."""
    masked = [s for s in SIDES if isinstance(doc.get(s), dict) and doc[s].get("password") == MASK]
    if not masked:
        return dict(doc)
    secrets: dict[str, Any] = {}
    path = environ.get(ENV_SECRETS)
    if path and os.path.exists(path):
        secrets = json.loads(Path(path).read_text(encoding="utf-8"))
    else:
        secrets = _from_urls(doc, environ)
    filled = dict(doc)
    for side in masked:
        creds = secrets.get(side) or secrets.get("endpoint")
        if not creds:
            raise RuntimeError(
                f"no broker credentials for {doc[side].get('name')}: the run's credentials "
                f"file (${ENV_SECRETS}) is not readable here and $MQBED_BROKER_URLS has no URL "
                f"for it; give this worker the broker URLs in its environment"
            )
        filled[side] = {**doc[side], **creds}
    return filled
