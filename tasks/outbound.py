"""Where may the harness send a request? Only under a URL root the deployment allows, and never to
this host, a link-local address or a cloud metadata service unless the deployment names that address.

Two checks, one home for both callers (the agents' model calls, HARNESS_AGENT_URL_ALLOW; the alert
channels' webhooks, HARNESS_ALERT_URL_ALLOW):

- On save and again before sending, a URL must be plain (every server on the way reads it the same
  way) and lie under one root of the allow-list: `url_allow_error`.
- At send time the host is resolved once, every address it resolves to is checked, and the request
  connects to the checked address (`send`), so a name that resolves elsewhere on a second lookup
  (DNS rebinding) cannot reach 127.0.0.1. Redirects are never followed.
"""

import ipaddress
import re
import socket
from urllib.parse import unquote, urlsplit

import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}

# Percent-encoding is decoded until it stops changing; a path still changing after this many rounds
# is refused rather than decoded further.
MAX_DECODE_ROUNDS = 4
# Characters a server may read as path structure even when encoded (/ \ . ; and % itself, which
# starts a second round of decoding): an allowed root must not be escaped through any of them.
_ENCODED_STRUCTURE = re.compile(r"%(2f|5c|2e|3b|25)", re.IGNORECASE)
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,=:@]+")
# A webhook's token may ride in its query (DingTalk's access_token, WeCom's key): printable ASCII.
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")

# Cloud metadata services outside link-local: AWS over IPv6, Alibaba Cloud, Azure's wire server.
# (169.254.169.254, Tencent Cloud's 169.254.0.23 and the rest of 169.254.0.0/16 are link-local.)
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "168.63.129.16"))
# "This network": a connection to 0.0.0.0 reaches this host on Linux.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


class OutboundRefused(Exception):
    """The request was not sent: its address is one the deployment did not name (the reason says which)."""


def plain_url_path(path: str) -> str | None:
    """`path` as a server would finally read it, or None when servers may read it differently.

    Decoded until it stops changing, it must be ASCII segments of unreserved characters (no ; path
    parameters, backslashes, whitespace or controls), with no `.`/`..` and no empty segment but a
    trailing one; and the raw text must not encode a separator, a dot, a ; or a %. Then what is
    compared with an allowed root is what any server on the way sees: Tomcat's `..;`, a proxy that
    decodes twice, one that folds full-width dots or backslashes."""
    if _ENCODED_STRUCTURE.search(path):
        return None
    decoded = path
    for _round in range(MAX_DECODE_ROUNDS):
        try:
            once = unquote(decoded, errors="strict")
        except UnicodeDecodeError:
            return None
        if once == decoded:
            break
        decoded = once
    else:
        return None
    if decoded and not decoded.startswith("/"):
        return None
    inner = decoded.removeprefix("/").removesuffix("/")
    segments = inner.split("/") if inner else []
    if any(not _PLAIN_SEGMENT.fullmatch(s) or s in {".", ".."} for s in segments):
        return None
    return decoded


def plain_url_error(url: str, *, query: bool = False) -> str | None:
    """Why `url` is not a plain http(s) URL that every server reads the same way, or None.

    query=True lets a printable ASCII query string through (a webhook's token); never a user or a
    fragment."""
    parts = urlsplit(url or "")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return "not a URL"
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or "%" in parts.netloc:
        return "not a URL (http or https and a host)"
    if parts.username is not None or parts.password is not None or parts.fragment:
        return "not a plain URL (no user, query string or fragment)"
    if parts.query and not (query and _PLAIN_QUERY.fullmatch(parts.query)):
        return "not a plain URL (no user, query string or fragment)"
    if plain_url_path(parts.path) is None:
        return (
            "not a plain URL (no ; path parameters, backslashes, encoded separators or dots, "
            ". or .. segments, or characters outside ASCII)"
        )
    return None


def url_under_root(url: str, root: str, *, query: bool = False) -> bool:
    """Whether the plain URL `url` lies under `root`: same scheme and host, the root's port if it names
    one (any port if not), and a decoded path equal to the root's or below it by whole segments. A
    host is compared whole, never as a string prefix (api.example.com.attacker.test)."""
    if plain_url_error(url, query=query) is not None:
        return False
    parts, allow = urlsplit(url), urlsplit(root)
    if allow.scheme != parts.scheme or allow.hostname != parts.hostname:
        return False
    if allow.port is not None and (parts.port or DEFAULT_PORTS.get(parts.scheme)) != allow.port:
        return False
    path = (plain_url_path(parts.path) or "").rstrip("/")
    prefix = allow.path.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def url_allow_error(url: str, roots: list[str], *, setting: str, what: str, query: bool = False) -> str | None:
    """Why `url` may not receive `what` under the allow-list `roots` (the setting named `setting`),
    or None when it lies under one of them (url_under_root)."""
    refused = plain_url_error(url, query=query)
    if refused is not None:
        return refused
    if any(url_under_root(url, root, query=query) for root in roots):
        return None
    return f"not allowed: this deployment sends {what} only to the URLs in {setting}"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) is not the address
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip


def address_refusal(address: str, *, host: str) -> str | None:
    """Why a request for `host` may not connect to `address`, or None when it may.

    Loopback (and 0.0.0.0), link-local (169.254.0.0/16, fe80::/10) and cloud metadata addresses are
    refused unless `host` is that address written out: a deployment that wants a receiver on this host
    names http://127.0.0.1:PORT, and no name (however it resolves today) can stand in for it."""
    ip = _address(address)
    if ip is None:
        return f"{host} resolves to {address!r}, not an IP address"
    if ip.is_loopback or ip.is_unspecified or ip in _THIS_NETWORK:
        kind = "this host (loopback)"
    elif ip.is_link_local:
        kind = "a link-local address"
    elif ip in METADATA_ADDRESSES:
        kind = "a cloud metadata address"
    else:
        return None
    if _address(host.strip("[]")) == ip:
        return None
    return f"{host} resolves to {ip}, {kind}: sent there only when the allowed URL names that address itself"


def pinned_address(host: str, port: int) -> str:
    """The address to connect to for `host`: resolved once, every address checked (address_refusal).
    Raises OutboundRefused when one is refused, httpx.ConnectError when the name does not resolve."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    for address in addresses:
        if (why := address_refusal(address, host=host)) is not None:
            raise OutboundRefused(why)
    if not addresses:
        raise httpx.ConnectError(f"cannot resolve {host}: no address")
    return addresses[0]


def send(client: httpx.Client, method: str, url: str, **kwargs) -> httpx.Response:
    """`client.request(method, url, ...)` connected to the address checked for the URL's host
    (pinned_address), never following a redirect. The Host header and TLS (SNI and the certificate's
    name) still use the URL's host. Raises OutboundRefused before anything is sent."""
    target = httpx.URL(url)
    host = target.raw_host.decode("ascii")
    address = pinned_address(host, target.port or DEFAULT_PORTS[target.scheme])
    headers = {**dict(kwargs.pop("headers", None) or {}), "Host": target.netloc.decode("ascii")}
    extensions = {"sni_hostname": host} if target.scheme == "https" else {}
    return client.request(
        method,
        target.copy_with(host=address),
        headers=headers,
        extensions=extensions,
        follow_redirects=False,
        **kwargs,
    )
