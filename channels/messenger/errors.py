"""Graph API failures -> gateway.core.ports.DeliveryError, by Meta's error code and subcode and the HTTP
status, never by the wording of a message (docs/messenger.md, "Troubleshooting").

Meta answers a refused call with `{"error": {"message", "type", "code", "error_subcode", "fbtrace_id"}}`;
the codes below are those of the Send API's error reference and the Graph API's rate limiting."""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.core.ports import DeliveryError

# Rate limits: app (4), user (17), Page (32), the Send API's own (613), Messenger's business use case (80006).
RATE_LIMITED = frozenset({4, 17, 32, 613, 80006})
# A wait Meta does not state: rate limits last minutes, and asking sooner counts against the limit.
DEFAULT_RATE_WAIT = 60.0
TEMPORARY = frozenset({1200})  # "Temporary send message failure. Please try again later."
BAD_TOKEN = 190
PERMISSION = frozenset({10, 200, 230})  # a permission the Page or app lacks (pages_messaging)
# The person blocked the Page or cannot be reached (551), or is no longer there (100/2018001).
UNAVAILABLE = frozenset({551})
NO_SUCH_PERSON = frozenset({(100, 2018001)})
# Sent outside the 24-hour window without a tag that lets it through.
WINDOW = frozenset({(10, 2018278)})


class MessengerStartError(RuntimeError):
    """The channel could not start: the Page token refused, or the Graph API out of reach."""


class GraphError(Exception):
    """Meta refused a Graph API call. `message` is Meta's, with the Page token masked; `retry_after`
    what the answer's headers said about waiting, if they did."""

    def __init__(
        self, status: int, code: int | None, subcode: int | None, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(status, code, subcode, message)
        self.status = status
        self.code = code
        self.subcode = subcode
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        sub = f"/{self.subcode}" if self.subcode is not None else ""
        return f"HTTP {self.status}, error {self.code}{sub}: {self.message}"

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.code in RATE_LIMITED


def _graph(exc: GraphError, op: str) -> DeliveryError:
    what = f"messenger {op} failed: {exc}"
    pair = (exc.code, exc.subcode)
    if exc.rate_limited:
        wait = exc.retry_after if exc.retry_after is not None else DEFAULT_RATE_WAIT
        return DeliveryError(what, retryable=True, retry_after=wait)
    if exc.code in TEMPORARY:
        return DeliveryError(what, retryable=True)
    if pair in WINDOW:
        return DeliveryError(
            f"messenger {op} refused: outside Messenger's 24-hour window (the person last wrote over a day "
            "ago); a message_tag lets an update through",
            retryable=False,
        )
    if exc.code in UNAVAILABLE or pair in NO_SUCH_PERSON:
        return DeliveryError(
            f"messenger {op} refused: this person is not available on Messenger (they blocked the Page, or "
            f"the account is gone) ({exc.code}/{exc.subcode})",
            retryable=False,
        )
    if exc.code == BAD_TOKEN:
        return DeliveryError(
            f"messenger {op} refused: Meta does not accept the Page access token (error 190: expired or "
            "revoked); make a new one and set page_access_token",
            retryable=False,
        )
    if exc.code in PERMISSION:
        return DeliveryError(
            f"messenger {op} refused: the Page token lacks a permission (error {exc.code}): it needs pages_messaging",
            retryable=False,
        )
    if exc.status >= 500:
        return DeliveryError(what, retryable=True)
    return DeliveryError(what, retryable=False)


def delivery_error(exc: BaseException, op: str) -> DeliveryError:
    """Classify what a Graph API call (`op`: "send", "typing") raised."""
    if isinstance(exc, DeliveryError):
        return exc
    if isinstance(exc, GraphError):
        return _graph(exc, op)
    name = type(exc).__name__
    # Connecting failed (refused, DNS, TLS, connect timeout): nothing reached Meta.
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return DeliveryError(f"messenger {op}: cannot connect ({name})", retryable=True)
    # Sent, maybe whole, and no answer: the message may be on its way to the person.
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return DeliveryError(f"messenger {op}: timed out ({name})", retryable=False, maybe_delivered=True)
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return DeliveryError(f"messenger {op}: connection lost ({name})", retryable=False, maybe_delivered=True)
    return DeliveryError(f"messenger {op}: unexpected {name}", retryable=False)
