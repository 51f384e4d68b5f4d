"""Refuse to start a server that other machines could reach without a key.

An API bound beyond loopback with no ``EMBED_API_KEY`` lets anyone there load, unload and
delete models; a Triton bound beyond loopback with no ``EMBED_TRITON_API_KEY`` lets anyone
load a model whose Python code Triton then runs. Both are checked here, once, by every
way of starting a server (``python -m embed_server serve``, ``uvicorn app:app``, the
Triton launcher and the dev script), so no start-up path can skip them.
"""

from __future__ import annotations

import ipaddress

from pydantic import SecretStr

from embed_server.settings import Settings


class UnsafeExposure(RuntimeError):
    """The configuration would expose a privileged interface without a key."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds to this machine only; anything unparsable counts as exposed."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_value(key: SecretStr | None) -> str | None:
    """A key's text, or None when unset or empty: an empty key protects nothing."""
    return (key.get_secret_value() or None) if key is not None else None


def check_api_exposure(settings: Settings) -> None:
    if is_loopback(settings.host) or key_value(settings.api_key) or settings.allow_unauthenticated:
        return
    raise UnsafeExposure(
        f"EMBED_HOST={settings.host} is reachable from other machines and EMBED_API_KEY is "
        "not set, so anyone there could load, unload and delete models. Set EMBED_API_KEY "
        "(clients send 'Authorization: Bearer <key>'), bind to 127.0.0.1, or set "
        "EMBED_ALLOW_UNAUTHENTICATED=true to run without a key on purpose."
    )


def check_triton_exposure(host: str, api_key: str | None) -> None:
    if is_loopback(host) or api_key:
        return
    raise UnsafeExposure(
        f"Triton bound to {host} (EMBED_TRITON_HOST) exposes its repository API, which can "
        "load and run arbitrary model code, and EMBED_TRITON_API_KEY is not set. Set "
        "EMBED_TRITON_API_KEY (Triton then demands it on every API but health) or keep "
        "Triton on 127.0.0.1."
    )


def check_exposure(settings: Settings) -> None:
    """Both checks, for ``serve``, which starts the API and Triton together."""
    check_api_exposure(settings)
    check_triton_exposure(settings.triton_host, key_value(settings.triton_api_key))
