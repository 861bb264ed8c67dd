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
from dataclasses import dataclass, field

from starlette.requests import Request

#: The session cookie's name.
SESSION_COOKIE = "ksq_session"
#: The form field the CSRF value travels in.
CSRF_FIELD = "csrf"


@dataclass
class Guard:
    """The dashboard's token and the key its cookies are signed with (new at each start:
    a restart signs everyone out)."""

    token: str | None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def read_only(self) -> bool:
        return not self.token

    def _sign(self, what: str) -> str:
        return hmac.new(self.key, what.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the dashboard's token (constant time)."""
        if self.read_only:
            return False
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> str:
        """A session cookie's value: a nonce and its signature."""
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign('session:' + nonce)}"

    def session_of(self, request: Request) -> str | None:
        """The request's session, when its cookie is one this dashboard signed."""
        if self.read_only:
            return None
        value = request.cookies.get(SESSION_COOKIE, "")
        nonce, _, signature = value.partition(".")
        if nonce and hmac.compare_digest(signature, self._sign("session:" + nonce)):
            return value
        return None

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
        if not hmac.compare_digest(form_csrf, self.csrf_for(session)):
            return "the form is not this page's (CSRF): reload it and try again"
        return None
