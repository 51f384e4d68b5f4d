"""Who may call a route: declared on the route itself, admin when it says nothing.

Each route names its level with ``openapi_extra=access(Access.X)`` (the level shows in
the OpenAPI schema too). The guard (:mod:`embed_server.api.guards`) matches a request to
its route before the body is read and applies that level, so a route added later without
a declaration needs the key: it fails closed, where a list of protected paths failed open.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.routing import BaseRoute, Route, Router

_EXTENSION = "x-access"


class Access(Enum):
    # Anyone: liveness, readiness, the dashboard page (it holds no data), the API schema.
    PUBLIC = "public"
    # Inference, listings, metrics and dashboard data: the key only with EMBED_API_KEY_INFER.
    READ = "read"
    # Anything that changes the server (load, unload, delete, jobs): always the key.
    ADMIN = "admin"


def access(level: Access) -> dict[str, Any]:
    """The ``openapi_extra`` of a route that declares ``level``."""
    return {_EXTENSION: level.value}


def declared_access(route: BaseRoute) -> Access | None:
    """The level a route declares, or None when it declares none."""
    extra = getattr(route, "openapi_extra", None) or {}
    return Access(extra[_EXTENSION]) if _EXTENSION in extra else None


def documentation_paths(app: FastAPI) -> frozenset[str]:
    """FastAPI's own routes (the OpenAPI schema and its viewers) cannot carry a declaration;
    they are public, as the schema holds no data."""
    paths = (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
    return frozenset(path for path in paths if path)


@dataclass(frozen=True)
class _Entry:
    pattern: re.Pattern[str]
    methods: frozenset[str]
    level: Access


class RouteAccess:
    """The level of the route a request will reach, found from the request line alone.

    Routes are matched as the router matches them: the first whose path and method match,
    else the first whose path matches (the router answers 405 for it). A request that no
    route matches is ADMIN. The table is rebuilt when the app's own route list changes; a
    route added to a router after its inclusion is missing from it, so it is ADMIN too.
    """

    def __init__(self, router: Router, documentation: frozenset[str]) -> None:
        self._router = router
        self._documentation = documentation
        self._built_for: tuple[int, ...] = ()
        self._entries: list[_Entry] = []

    def level(self, scope: MutableMapping[str, Any]) -> Access:
        entries = self._table()
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        by_path_only: Access | None = None
        for entry in entries:
            if entry.pattern.match(path):
                if not entry.methods or scope["method"] in entry.methods:
                    return entry.level
                by_path_only = by_path_only or entry.level
        return by_path_only or Access.ADMIN

    def _table(self) -> list[_Entry]:
        routes = self._router.routes
        key = tuple(map(id, routes))
        if key != self._built_for:
            self._entries = [
                _Entry(context.path_regex, frozenset(context.methods or ()), level)
                for context in iter_route_contexts(routes)
                if (level := self._level_of(context)) is not None
            ]
            self._built_for = key
        return self._entries

    def _level_of(self, context: RouteContext) -> Access | None:
        route = context.original_route
        if getattr(context, "path_regex", None) is None:
            return None
        if isinstance(route, APIRoute):
            return declared_access(route) or Access.ADMIN
        if isinstance(route, Route) and context.path in self._documentation:
            return Access.PUBLIC
        return Access.ADMIN
