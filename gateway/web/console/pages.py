"""The console's pages under /console (docs/console.md): plain server-rendered HTML (Jinja2, autoescaped)
over the same ConsoleService as the JSON API, with forms that work without JavaScript.

Every action is a POST form carrying the session's CSRF token; it answers with a 303 back to the
page it came from (`back`, a console path only) and a notice chosen by a fixed code (`?done=…`), so
nothing a link carries is ever shown as a message."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import jinja2
from aiohttp import web

from gateway.core.http_input import BodyTooLarge, read_body
from gateway.core.ports import Throttled, retry_after
from gateway.web.console.api import MAX_BODY_BYTES, int_param, memory_query, path_int
from gateway.web.console.auth import ConsoleAuth, CsrfRejected, Unauthenticated, clear_cookie
from gateway.web.console.once import NEW_LINK, REFUSALS, SIGNIN_PATH
from gateway.web.console.service import (
    ACTION_ARGUMENT,
    Conflict,
    ConsoleError,
    ConsoleService,
    Invalid,
    Viewer,
)
from memory.records.model import MemoryClass, Provenance, ReviewStatus, ScopeKind
from memory.store.jobs import STATUSES

PageHandler = Callable[[web.Request, Viewer, Mapping[str, str]], Awaitable[web.StreamResponse]]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC_FILES = ("console.css", "console.js")
MAX_FORM_FIELDS = 32
REVIEW_PAGE = 50  # memories on one page of the review queue

# What a finished action says, by the code its redirect carries. Unknown codes say nothing.
NOTICES = {
    "confirm": "Confirmed: this memory may now be followed as an instruction.",
    "edit": "Edited: your text replaced the memory's, and its revision shows what changed.",
    "evidence": "Marked as evidence only: it is weighed, never followed as an instruction.",
    "scope": "The memory's scope is narrower now.",
    "stale": "Marked as stale.",
    "merge": "Merged: the other memory now points to this one.",
    "reject": "Rejected.",
    "dispute": "Marked as disputed: it is no longer followed as an instruction.",
    "supersede": "Superseded: a new memory holds your text, and this one points to it.",
    "undo": "Undone: the memory is back as it was before that change.",
    "saved": "Memory.md saved.",
    "approved": "Pairing approved: that account may talk to the assistant now.",
    "retried": "The job is queued again.",
}

ERROR_TITLES = {403: "Not allowed", 404: "Not found", 409: "Changed meanwhile"}

# Why a recalled item did or did not reach the prompt (memory.store.traces.REASONS), in words.
TRACE_REASONS = {
    "injected": "in the prompt",
    "beyond_limit": "enough items were already chosen",
    "over_memory_budget": "longer than the memory space left",
    "near_repeat": "repeats an item already chosen",
    "dropped_by_context_budget": "its section did not fit the context budget",
}

# A console path of this server: no scheme, no host, no whitespace or control characters.
_CONSOLE_PATH = re.compile(r"/console(?:[/?][^\x00-\x20\x7f\\]*)?")


def console_path(value: str, default: str = "/console") -> str:
    """`value` when it is a path inside the console, else `default`: where a form may send the
    browser back to, or where to go after signing in."""
    return value if len(value) <= 2000 and _CONSOLE_PATH.fullmatch(value) else default


def with_notice(path: str, code: str) -> str:
    """`path` with its `done` parameter set to `code` (replacing one it had)."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "done"]
    return urlunsplit(("", "", parts.path, urlencode([*query, ("done", code)]), ""))


def _when(value: str | None) -> str:
    """An ISO timestamp as people read it (UTC, to the minute)."""
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return value


def _shown(value: Any) -> str:
    """A record field's value in words: what a revision changed, or a use policy."""
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        on = [k.replace("_", " ") for k, v in value.items() if v is True]
        return ", ".join(on) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.web.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["when"] = _when
_templates.filters["shown"] = _shown
_templates.filters["words"] = lambda value: str(value).replace("_", " ")
_templates.globals["static"] = {name: f"/console/static/{name}" for name in STATIC_FILES}
_templates.globals["ACTION_ARGUMENT"] = ACTION_ARGUMENT
_templates.globals["TRACE_REASONS"] = TRACE_REASONS
# The navigation: (page key, path, label, administrators only).
_templates.globals["NAV"] = (
    ("overview", "/console", "Overview", False),
    ("review", "/console/review", "Review", False),
    ("memory", "/console/memory", "Memory", False),
    ("traces", "/console/traces", "Traces", False),
    ("core", "/console/core", "Memory.md", False),
    ("users", "/console/users", "Users", True),
    ("jobs", "/console/jobs", "Jobs", True),
)


def render(template: str, code: int = 200, **context: Any) -> web.Response:
    context.setdefault("active", "")
    context.setdefault("notice", None)
    context.setdefault("back", "/console")
    html = _templates.get_template(template).render(**context)
    return web.Response(text=html, status=code, content_type="text/html", headers=SECURITY_HEADERS)


async def read_form(request: web.Request) -> dict[str, str]:
    """A posted form (application/x-www-form-urlencoded, as every console form is sent), read under
    the console's own cap (BodyTooLarge past it). Anything else posted reads as an empty form (and
    so fails CSRF)."""
    if request.content_type != "application/x-www-form-urlencoded":
        return {}
    raw = await read_body(request, MAX_BODY_BYTES)
    try:
        pairs = parse_qsl(raw.decode("ascii"), keep_blank_values=True, errors="replace", max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        return {}
    return dict(pairs)  # a repeated field keeps its last value


def pager(request: web.Request, offset: int, limit: int, total: int) -> tuple[str | None, str | None]:
    """Links to the previous and the next page of a list (None where there is none), keeping the
    page's other query parameters."""
    params = [(k, v) for k, v in request.query.items() if k not in ("offset", "done")]

    def at(start: int) -> str:
        return f"{request.path}?" + urlencode([*params, ("offset", str(start))])

    previous = at(max(0, offset - limit)) if offset > 0 else None
    return previous, (at(offset + limit) if offset + limit < total else None)


def _notice(request: web.Request) -> str | None:
    return NOTICES.get(request.query.get("done", ""))


def _lines(text: str) -> str:
    # A browser submits a textarea's line breaks as CRLF; files and memories keep LF.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _throttled(response: web.Response, exc: Throttled) -> web.Response:
    response.headers.update(retry_after(exc.retry_after))
    return response


def _redirect(path: str, code: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(with_notice(path, code))


class ConsolePages:
    def __init__(self, service: ConsoleService, auth: ConsoleAuth) -> None:
        self.service = service
        self.auth = auth

    def mount(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/console/login", self.login_form)
        r.add_post("/console/login", self.login)
        r.add_post("/console/logout", self._page(self.logout))
        r.add_get(SIGNIN_PATH, self.sign_in_once)
        static = r.add_static("/console/static", _static_dir(), append_version=True)
        # Versioned URLs, so a browser never runs an old script against a new page.
        _templates.globals["static"] = {name: str(static.url_for(filename=name)) for name in STATIC_FILES}
        page = self._page
        r.add_get("/console", page(self.overview))
        r.add_get("/console/", self.slash)
        r.add_get("/console/review", page(self.review_queue))
        r.add_get("/console/memory", page(self.memory_browser))
        r.add_get("/console/memory/{id}", page(self.memory_record))
        r.add_post("/console/memory/{id}/review", page(self.review))
        r.add_post("/console/revisions/{id}/undo", page(self.undo))
        r.add_get("/console/traces", page(self.traces))
        r.add_get("/console/core", page(self.core))
        r.add_post("/console/core", page(self.save_core))
        r.add_get("/console/users", page(self.users))
        r.add_post("/console/pairing/{code}/approve", page(self.approve_pairing))
        r.add_get("/console/jobs", page(self.jobs))
        r.add_post("/console/jobs/{id}/retry", page(self.retry_job))
        r.add_get("/console/{tail:.+}", page(self.not_found))

    def _page(self, handler: PageHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def run(request: web.Request) -> web.StreamResponse:
            form: Mapping[str, str] = {}
            if request.method == "POST":
                try:
                    form = await read_form(request)
                except BodyTooLarge as exc:
                    return render("error.html", 413, viewer=None, title="Too large", message=str(exc))
            back = console_path(form.get("back", ""))
            try:
                viewer = await self.auth.viewer(request, form)
            except Unauthenticated:
                # After signing in, a GET returns to its page; a form returns to where it was sent from.
                target = request.path_qs if request.method == "GET" else back
                raise web.HTTPSeeOther(f"/console/login?next={quote(target, safe='')}") from None
            except CsrfRejected as exc:
                return render("error.html", 403, viewer=None, title="Not allowed", message=str(exc), back=back)
            except Throttled as exc:
                return _throttled(render("error.html", 429, viewer=None, title="Too many tries", message=str(exc)), exc)
            try:
                return await handler(request, viewer, form)
            except ConsoleError as exc:
                title = ERROR_TITLES.get(exc.status, "Not possible")
                return render("error.html", exc.status, viewer=viewer, title=title, message=str(exc), back=back)

        return run

    # -- signing in and out ----------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.Response:
        next_path = console_path(request.query.get("next", ""))
        try:
            await self.auth.viewer(request)
        except (Unauthenticated, CsrfRejected, Throttled):
            return render("login.html", viewer=None, next=next_path, error=None)
        raise web.HTTPSeeOther(next_path)  # signed in already

    async def login(self, request: web.Request) -> web.StreamResponse:
        try:
            posted = await read_form(request)
        except BodyTooLarge as exc:
            return render("login.html", 413, viewer=None, next="/console", error=str(exc))
        token = posted.get("token", "")[:4096]
        next_path = console_path(posted.get("next", ""))
        if not self.auth.same_origin(request):
            return render("login.html", 403, viewer=None, next=next_path, error="Sign in from this console's own page.")
        try:
            signed = await self.auth.sign_in(request, token)
        except Throttled as exc:
            message = f"Too many wrong tokens from here lately: {exc}."
            return _throttled(render("login.html", 429, viewer=None, next=next_path, error=message), exc)
        if signed is None:
            return render("login.html", 401, viewer=None, next=next_path, error="That token is not valid here.")
        session_id, _viewer = signed
        response = web.HTTPSeeOther(next_path)
        self.auth.set_cookie(response, request, session_id)
        raise response

    async def sign_in_once(self, request: web.Request) -> web.StreamResponse:
        """The one-time link printed at start (once.py): a session, then the overview."""
        signed = await self.auth.sign_in_once(request, request.query.get("code", ""))
        if signed is None:
            message = "Sign-in links work only on this machine, while no user has a token: sign in with a token."
            return render("error.html", 403, viewer=None, title="Not allowed", message=message, back="/console/login")
        if not isinstance(signed, tuple):
            message = f"{REFUSALS[signed]} {NEW_LINK}"
            return render(
                "error.html", 410, viewer=None, title="Link not valid", message=message, back="/console/login"
            )
        response = web.HTTPSeeOther("/console")
        self.auth.set_cookie(response, request, signed[0])
        raise response

    async def logout(self, request: web.Request, _viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        await self.auth.sign_out(request)
        response = web.HTTPSeeOther("/console/login")
        clear_cookie(response)
        raise response

    # -- overview and review -----------------------------------------------------------------------

    async def overview(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        status = await self.service.status(viewer) if viewer.is_admin else None
        queue = await self.service.review_queue(viewer, limit=3)
        return render(
            "overview.html", viewer=viewer, status=status, queue=queue, active="overview", notice=_notice(request)
        )

    async def review_queue(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        offset = int_param(request.query, "offset", 0, 0, 100_000)
        queue = await self.service.review_queue(viewer, limit=REVIEW_PAGE, offset=offset)
        return render(
            "review.html",
            viewer=viewer,
            items=queue["items"],
            total=queue["total"],
            active="review",
            notice=_notice(request),
            back=request.path_qs,
            pages=pager(request, offset, REVIEW_PAGE, queue["total"]),
        )

    async def review(self, request: web.Request, viewer: Viewer, form: Mapping[str, str]) -> web.StreamResponse:
        record_id = request.match_info["id"]
        action = form.get("action", "")
        back = console_path(form.get("back", ""), f"/console/memory/{quote(record_id, safe='')}")
        await self.service.review(viewer, record_id, action, _lines(form.get("arg", ""))[:20_000])
        raise _redirect(back, action)

    async def undo(self, request: web.Request, viewer: Viewer, form: Mapping[str, str]) -> web.StreamResponse:
        done = await self.service.undo_revision(viewer, path_int(request, "id"))
        first = done["records"][0]["id"] if done["records"] else ""
        raise _redirect(console_path(form.get("back", ""), f"/console/memory/{quote(first, safe='')}"), "undo")

    # -- memory --------------------------------------------------------------------------------------

    async def memory_browser(
        self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]
    ) -> web.StreamResponse:
        query = memory_query(request.query)
        found = await self.service.memories(viewer, query)
        kinds = [k.value for k in ScopeKind if viewer.is_admin or k != ScopeKind.CHANNEL]
        if query.scope and query.scope not in kinds:
            kinds.append(query.scope)  # an exact scope, e.g. followed from a record's page
        return render(
            "memory.html",
            viewer=viewer,
            active="memory",
            query=query,
            found=found,
            searching=bool(query.q.strip()),
            choices={
                "scope": kinds,
                "memory_class": [m.value for m in MemoryClass],
                "provenance": [p.value for p in Provenance],
                "review_status": [s.value for s in ReviewStatus],
                "status": ["active", "superseded", "any"],
            },
            pages=pager(request, query.offset, query.limit, found["total"]),
        )

    async def memory_record(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        shown = await self.service.record(viewer, request.match_info["id"])
        return render(
            "record.html",
            viewer=viewer,
            active="memory",
            notice=_notice(request),
            back=request.path,
            **shown,
        )

    async def traces(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        session = request.query.get("session", "")[:512]
        found = await self.service.traces(viewer, session, limit=30)
        return render("traces.html", viewer=viewer, active="traces", session=session, items=found["items"])

    # -- Memory.md -----------------------------------------------------------------------------------

    async def core(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        core = self.service.core_file(viewer, request.query.get("which", "personal"))
        return render(
            "core.html", viewer=viewer, active="core", core=core, text=core["text"], error=None, saved_text=None,
            notice=_notice(request),
        )  # fmt: skip

    async def save_core(self, request: web.Request, viewer: Viewer, form: Mapping[str, str]) -> web.StreamResponse:
        which = form.get("which", "personal")
        text = _lines(form.get("text", ""))
        try:
            self.service.save_core(viewer, which, text, form.get("etag", ""))
        except (Conflict, Invalid) as exc:
            # Keep what the person wrote. On a conflict, show what is saved now too: saving again
            # (with the new etag) then replaces it knowingly.
            current = self.service.core_file(viewer, which)
            saved_text = current["text"] if isinstance(exc, Conflict) else None
            return render(
                "core.html", exc.status, viewer=viewer, active="core", core=current, text=text, error=str(exc),
                saved_text=saved_text,
            )  # fmt: skip
        raise _redirect(f"/console/core?which={quote(which)}", "saved")

    # -- administration ------------------------------------------------------------------------------

    async def users(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        users = await self.service.users(viewer)
        pairing = await self.service.pairing(viewer)
        return render(
            "users.html",
            viewer=viewer,
            active="users",
            users=users["items"],
            pairing=pairing["items"],
            notice=_notice(request),
            back=request.path,
        )

    async def approve_pairing(
        self, request: web.Request, viewer: Viewer, form: Mapping[str, str]
    ) -> web.StreamResponse:
        await self.service.approve_pairing(viewer, request.match_info["code"])
        raise _redirect(console_path(form.get("back", ""), "/console/users"), "approved")

    async def jobs(self, request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        status = request.query.get("status", "")[:16]
        kind = request.query.get("kind", "")[:64]
        found = await self.service.jobs(viewer, status, kind, limit=100)
        return render(
            "jobs.html",
            viewer=viewer,
            active="jobs",
            counts=found["counts"],
            items=found["items"],
            schedules=found["schedules"],
            status=status,
            kind=kind,
            statuses=STATUSES,
            notice=_notice(request),
            back=request.path_qs,
        )

    async def retry_job(self, request: web.Request, viewer: Viewer, form: Mapping[str, str]) -> web.StreamResponse:
        await self.service.retry_job(viewer, path_int(request, "id"))
        raise _redirect(console_path(form.get("back", ""), "/console/jobs"), "retried")

    async def slash(self, _request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect("/console")

    async def not_found(self, _request: web.Request, viewer: Viewer, _form: Mapping[str, str]) -> web.StreamResponse:
        return render("error.html", 404, viewer=viewer, title="Not found", message="There is no such console page.")


def _static_dir() -> Any:
    from importlib import resources

    return resources.files("gateway.web.console").joinpath("static")
