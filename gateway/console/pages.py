"""The console's pages under /console (issue 8): plain server-rendered HTML (Jinja2, autoescaped)
over the same ConsoleService as the JSON API, with forms that work without JavaScript."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from gateway.console.auth import ConsoleAuth, CsrfRejected, Unauthenticated, clear_cookie, same_origin, set_cookie
from gateway.console.service import ConsoleError, ConsoleService, Viewer

PageHandler = Callable[[web.Request, Viewer, Mapping[str, str]], Awaitable[web.StreamResponse]]

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def render(template: str, code: int = 200, **context: Any) -> web.Response:
    html = _templates.get_template(template).render(**context)
    return web.Response(text=html, status=code, content_type="text/html", headers=SECURITY_HEADERS)


def _next_path(value: str) -> str:
    """Where to go after signing in: only a console path of this server."""
    return value if value.startswith("/console") and not value.startswith("//") else "/console"


class ConsolePages:
    def __init__(self, service: ConsoleService, auth: ConsoleAuth) -> None:
        self.service = service
        self.auth = auth

    def mount(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/console/login", self.login_form)
        r.add_post("/console/login", self.login)
        r.add_post("/console/logout", self._page(self.logout))
        r.add_static("/console/static", _static_dir(), append_version=True)
        r.add_get("/console", self._page(self.overview))

    def _page(self, handler: PageHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def run(request: web.Request) -> web.StreamResponse:
            form: Mapping[str, str] = {}
            if request.method == "POST":
                posted = await request.post()
                form = {k: v for k, v in posted.items() if isinstance(v, str)}
            try:
                viewer = await self.auth.viewer(request, form)
            except Unauthenticated:
                raise web.HTTPSeeOther(f"/console/login?next={quote(request.path_qs, safe='')}") from None
            except CsrfRejected as exc:
                return render("error.html", 403, viewer=None, title="Refused", message=str(exc))
            try:
                return await handler(request, viewer, form)
            except ConsoleError as exc:
                return render("error.html", exc.status, viewer=viewer, title="Not possible", message=str(exc))

        return run

    # -- signing in and out ----------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.Response:
        return render("login.html", viewer=None, next=_next_path(request.query.get("next", "")), error=None)

    async def login(self, request: web.Request) -> web.StreamResponse:
        posted = await request.post()
        token = str(posted.get("token", ""))[:4096]
        next_path = _next_path(str(posted.get("next", "")))
        if not same_origin(request):
            return render("login.html", 403, viewer=None, next=next_path, error="Sign in from this console's own page.")
        signed = await self.auth.sign_in(request, token)
        if signed is None:
            message = "That token is not valid here (or there were too many tries: wait a minute)."
            return render("login.html", 401, viewer=None, next=next_path, error=message)
        session_id, _viewer = signed
        response = web.HTTPSeeOther(next_path)
        set_cookie(response, request, session_id, int(self.auth.sessions.ttl.total_seconds()))
        raise response

    async def logout(self, request: web.Request, _viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        await self.auth.sign_out(request)
        response = web.HTTPSeeOther("/console/login")
        clear_cookie(response)
        raise response

    # -- pages -----------------------------------------------------------------------------------

    async def overview(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        status = await self.service.status(viewer) if viewer.is_admin else None
        queue = await self.service.review_queue(viewer, limit=5)
        return render("overview.html", viewer=viewer, status=status, queue=queue, active="overview")


def _static_dir() -> Any:
    from importlib import resources

    return resources.files("gateway.console").joinpath("static")
