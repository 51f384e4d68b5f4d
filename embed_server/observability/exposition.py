"""One Prometheus scrape for the whole stack: the facade's series followed by Triton's.

Triton keeps its ``nv_*`` series on its own metrics port, usually not reachable from
outside; relaying them here means one scrape target sees both. Family names cannot clash
(``embed_*`` versus ``nv_*``), so the two expositions are concatenated as they are. If
Triton cannot be read the facade's series are still served, with
``embed_triton_metrics_up 0`` saying why ``nv_*`` is missing.
"""

from __future__ import annotations

from prometheus_client import generate_latest

from embed_server.errors import TritonUnavailable
from embed_server.observability.metrics import registry
from embed_server.triton import TritonGateway

_UP_HELP = (
    "# HELP embed_triton_metrics_up Whether Triton's metrics endpoint answered this scrape.\n"
    "# TYPE embed_triton_metrics_up gauge\n"
)


async def prometheus_text(triton: TritonGateway) -> str:
    own = generate_latest(registry()).decode()
    try:
        relayed = await triton.metrics_text()
        up = 1
    except TritonUnavailable:
        relayed = ""
        up = 0
    if relayed and not relayed.endswith("\n"):
        relayed += "\n"
    return f"{own}{_UP_HELP}embed_triton_metrics_up {up}\n{relayed}"
