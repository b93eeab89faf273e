"""kopf, imported without the Kubernetes client: the one way this package imports kopf.

When the client (``kubernetes``) is installed, kopf imports it at its own import only to know its
model classes (``kopf._cogs.helpers.thirdparty``: isinstance checks for objects handed to kopf's
adopt/label helpers, which nftproxy never calls), and its default registry imports it for a
fallback login (nftproxy has its own, ``handlers.login``). That import costs every node ~18 MB of
RSS (the client, pydantic, requests, oauthlib: 64.7 -> 46.9 MB with the operator's modules) and
~0.2 s of start. kopf is imported as if the client were not installed (kopf supports that); the
client stays importable afterwards, for the kubeconfigs that need its loader
(``credentials._with_client_loader``). If something imported the client already, kopf sees it as
usual.
"""

from __future__ import annotations

import sys

if "kopf" in sys.modules or "kubernetes" in sys.modules:
    import kopf
else:
    sys.modules["kubernetes"] = None  # type: ignore[assignment]  # "not installed", for kopf's import only
    try:
        import kopf
    finally:
        del sys.modules["kubernetes"]

from kopf._core.intents import registries  # private (kopf is pinned)
from kopf._core.reactor import inventory  # private (kopf is pinned): handlers.NoMemories

# kopf's default registry (SmartOperatorRegistry) imports the client too, to add its fallback
# login through it. handlers.login is our login, so kopf never falls back: a plain registry.
if registries._default_registry is None:
    kopf.set_default_registry(kopf.OperatorRegistry())

__all__ = ["inventory", "kopf"]
