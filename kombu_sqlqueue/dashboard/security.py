"""Who may change anything through the dashboard, and proof that a form is the page's own.

Without a token the dashboard is read-only: no action is shown and every POST is refused.
With one, an operator signs in by typing it (``/login``); the answer is a session cookie —
an HMAC of a key made at start, never the token itself — that is ``HttpOnly`` and
``SameSite=Strict`` (a page on another site cannot send it). Each action form carries a
CSRF value, an HMAC of that session (a signed double submit: nothing kept server-side), and
a POST must bring both, and must not come from another site (``Origin``,
``Sec-Fetch-Site``). Comparisons are constant-time. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The session cookie's name.
SESSION_COOKIE = "ksq_session"
#: The form field the CSRF value travels in.
CSRF_FIELD = "csrf"
#: How long a sign-in lasts (seconds).
SESSION_SECONDS = 12 * 3600
#: Wrong tokens one client address may send per :data:`SIGN_IN_WINDOW` seconds; more are
#: refused unread (a token guessed at that pace is not guessed).
SIGN_IN_FAILURES = 10
SIGN_IN_WINDOW = 60.0
#: Client addresses whose failures are remembered at once (the oldest forgotten first).
SIGN_IN_CLIENTS = 10_000


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a value a client sent (any text) and one we made."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


@dataclass
class Guard:
    """The dashboard's token and the key its cookies are signed with (new at each start:
    a restart signs everyone out)."""

    token: str | None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    #: Client address → when its recent wrong tokens came (monotonic seconds).
    failures: OrderedDict[str, list[float]] = field(default_factory=OrderedDict)

    def sign_in_wait(self, client: str, now: float | None = None) -> float:
        """Seconds ``client`` must wait before its next sign-in is read (0: none)."""
        now = time.monotonic() if now is None else now
        recent = [t for t in self.failures.get(client, []) if now - t < SIGN_IN_WINDOW]
        if len(recent) < SIGN_IN_FAILURES:
            return 0.0
        return SIGN_IN_WINDOW - (now - recent[0])

    def sign_in_failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        recent = [t for t in self.failures.pop(client, []) if now - t < SIGN_IN_WINDOW]
        self.failures[client] = [*recent, now][-SIGN_IN_FAILURES:]
        while len(self.failures) > SIGN_IN_CLIENTS:
            self.failures.popitem(last=False)

    @property
    def read_only(self) -> bool:
        return not self.token

    def _sign(self, what: str) -> str:
        return hmac.new(self.key, what.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the dashboard's token (constant time; digests compared, so
        not even its length shows)."""
        if self.read_only:
            return False
        assert self.token is not None
        digest = hashlib.sha256
        return hmac.compare_digest(
            digest(given.encode("utf-8", "replace")).digest(), digest(self.token.encode()).digest()
        )

    def new_session(self, now: float | None = None) -> str:
        """A session cookie's value: a nonce, when it was made, and their signature."""
        made = int(time.time() if now is None else now)
        body = f"{secrets.token_hex(16)}.{made}"
        return f"{body}.{self._sign('session:' + body)}"

    def session_of(self, request: Request) -> str | None:
        """The request's session, when its cookie is one this dashboard signed less than
        ``SESSION_SECONDS`` ago."""
        if self.read_only:
            return None
        value = request.cookies.get(SESSION_COOKIE, "")
        body, _, signature = value.rpartition(".")
        made = body.partition(".")[2]
        if not (body and made.isdigit() and _same(signature, self._sign("session:" + body))):
            return None
        if time.time() - int(made) > SESSION_SECONDS:
            return None
        return value

    def signed_message(self, text: str) -> str:
        """``text`` and its signature: what the page says after an action, which a link
        from elsewhere cannot make it say."""
        return f"{self._sign('done:' + text)}.{text}"

    def message_of(self, value: str) -> str | None:
        """The text of a :meth:`signed_message` (None: none, or not one of ours)."""
        signature, _, text = value.partition(".")
        return text if text and _same(signature, self._sign("done:" + text)) else None

    def csrf_for(self, session: str | None) -> str:
        """The CSRF value forms of ``session`` carry ("" without one)."""
        return self._sign("csrf:" + session) if session else ""

    def refusal(self, request: Request, form_csrf: str) -> str | None:
        """Why a POST is refused (None: it may go on)."""
        if self.read_only:
            return "the dashboard is read-only: start it with --token to allow actions"
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return "a request from another site"
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return "a request from another origin"
        session = self.session_of(request)
        if session is None:
            return "sign in with the dashboard's token first"
        if not _same(form_csrf, self.csrf_for(session)):
            return "the form is not this page's (CSRF): reload it and try again"
        return None


#: What every response of the dashboard says of itself: nothing but its own scripts,
#: styles and forms, never framed (a confirm button under another page's), no sniffing.
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
        b"form-action 'self'; object-src 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


class SecurityHeaders:
    """ASGI middleware adding :data:`HEADERS` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
