"""The API docs (Swagger UI, Redoc) load every asset from this site's own static files: public CDNs
and font hosts are slow or blocked for many users. The page names no other host, and its
Content-Security-Policy tells the browser to fetch nothing from one (Redoc's bundle would fetch its
logo from a CDN; Swagger UI would ask an online validator)."""

import re
from html.parser import HTMLParser

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db

DOCS = ["/api/v1/docs/", "/api/v1/redoc/"]
ABSOLUTE = re.compile(r"(?:https?:)?//[a-z0-9-]+(?:\.[a-z0-9-]+)+", re.IGNORECASE)


class Assets(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "spec-url", "data", "poster", "srcset") and value:
                self.urls.append(value)

    def handle_data(self, data):
        self.inline.append(data)


@pytest.mark.parametrize("url", DOCS)
def test_every_asset_of_the_docs_is_a_local_static_file(url):
    response = Client().get(url)
    assert response.status_code == 200
    page = Assets()
    page.feed(response.content.decode())
    assert page.urls, "the page loads nothing?"
    for asset in page.urls:
        assert asset.startswith("/") and not asset.startswith("//"), asset
        if asset.startswith("/" + settings.STATIC_URL.lstrip("/")):
            relative = asset.removeprefix("/" + settings.STATIC_URL.lstrip("/"))
            assert finders.find(relative), f"{asset} is not one of our static files"
    assert ABSOLUTE.findall(" ".join(page.inline)) == []
    assert "googleapis" not in response.content.decode() and "gstatic" not in response.content.decode()


@pytest.mark.parametrize("url", DOCS)
def test_the_browser_is_told_to_fetch_from_this_site_only(url):
    policy = Client().get(url)["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["default-src"] == "'self'"
    for name, sources in directives.items():
        for source in sources.split():
            assert source in ("'self'", "'unsafe-inline'", "data:", "blob:", "'none'"), (name, source)


def test_swagger_ui_asks_no_online_validator():
    assert '"validatorUrl": null' in Client().get("/api/v1/docs/").content.decode()
