"""Who may talk to Triton: the addresses it binds and the key its restricted APIs demand.

Triton has no authentication of its own beyond a header per API group
(``--http-restricted-api``, ``--grpc-restricted-protocol``). With a key, every group but
health demands it, so liveness probes need no secret while the repository API (which can
load code) and everything else do. The flags and the headers that satisfy them are built
here, in one place, for the launcher, the dev script and the API's Triton client.

``python -m embed_server.triton_access --host HOST`` prints the restriction flags, one per
line, for the dev script's NGC and Docker branches; it refuses an exposed host without a key.
"""

from __future__ import annotations

import argparse

from embed_server.exposure import UnsafeExposure, check_triton_exposure, key_value
from embed_server.settings import Settings

HTTP_HEADER = "embed-triton-key"
# Triton looks for a gRPC restriction's key under this prefix (seen with 2.51).
GRPC_HEADER = f"triton-grpc-protocol-{HTTP_HEADER}"
RESTRICTED_GROUPS = (
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)


def bind_args(host: str) -> list[str]:
    return [f"--http-address={host}", f"--grpc-address={host}", f"--metrics-address={host}"]


def restriction_args(api_key: str | None) -> list[str]:
    if not api_key:
        return []
    rule = f"{','.join(RESTRICTED_GROUPS)}:{HTTP_HEADER}={api_key}"
    return [f"--http-restricted-api={rule}", f"--grpc-restricted-protocol={rule}"]


def http_headers(api_key: str | None) -> dict[str, str]:
    return {HTTP_HEADER: api_key} if api_key else {}


def grpc_headers(api_key: str | None) -> dict[str, str]:
    return {GRPC_HEADER: api_key} if api_key else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True, help="where Triton's ports are reachable")
    args = parser.parse_args(argv)
    key = key_value(Settings().triton_api_key)
    try:
        check_triton_exposure(args.host, key)
    except UnsafeExposure as error:
        raise SystemExit(f"refusing to start Triton: {error}") from None
    for arg in restriction_args(key):
        print(arg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
