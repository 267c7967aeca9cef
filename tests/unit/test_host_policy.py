"""Which Host a request may name (DNS rebinding): loopback names and addresses, where the server is
bound, where it is published; and who counts as a visitor on this machine."""

from __future__ import annotations

import pytest

from gateway.core.http_input import host_name, is_loopback_name
from gateway.web.server import HostPolicy

LOCAL = HostPolicy.build(["127.0.0.1"], [])
PUBLISHED = HostPolicy.build(["0.0.0.0"], ["https://chat.example.com", "https://bot.example.org:8443/telegram/t"])
NAMED = HostPolicy.build(["192.168.1.5"], [], ["clawgate.internal"])


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("evil.example:8080", "evil.example"),
        ("LOCALHOST", "localhost"),
        ("localhost.:80", "localhost"),
        ("[::1]:8080", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("", None),
        (None, None),
        ("[bad", None),
    ],
)
def test_the_name_in_a_host_header(header: str | None, name: str | None) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("policy", "host", "allowed"),
    [
        (LOCAL, "127.0.0.1:8080", True),
        (LOCAL, "localhost:8080", True),
        (LOCAL, "app.localhost", True),  # browsers resolve *.localhost to loopback themselves
        (LOCAL, "[::1]:8080", True),
        (LOCAL, "127.1.2.3", True),
        (LOCAL, "evil.example:8080", False),  # the rebinding page
        (LOCAL, "localhost.evil.example", False),
        (LOCAL, "192.168.1.5:8080", False),  # not where it listens
        (LOCAL, None, False),
        (PUBLISHED, "chat.example.com", True),
        (PUBLISHED, "CHAT.example.com:443", True),
        (PUBLISHED, "bot.example.org", True),  # Telegram's webhook_url
        (PUBLISHED, "10.1.2.3:8080", True),  # bound to every address: a kubelet probe's pod IP
        (PUBLISHED, "evil.example", False),
        (NAMED, "192.168.1.5:8080", True),
        (NAMED, "192.168.1.6:8080", False),
        (NAMED, "clawgate.internal", True),
        (NAMED, "evil.example", False),
    ],
)
def test_which_hosts_are_answered(policy: HostPolicy, host: str | None, allowed: bool) -> None:
    assert policy.allows(host_name(host)) is allowed


def test_a_named_bind_is_a_known_name() -> None:
    assert HostPolicy.build(["gateway.lan"], []).allows("gateway.lan")


@pytest.mark.parametrize(
    ("name", "loopback"),
    [
        ("localhost", True),
        ("a.localhost", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("10.0.0.1", False),
        (None, False),
    ],
)
def test_loopback_names(name: str | None, loopback: bool) -> None:
    assert is_loopback_name(name) is loopback
