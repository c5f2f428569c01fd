"""Helpers of the REST API tests (tests/api): a JSON client with a Bearer token, problem checks."""

import json

from django.test import Client
from django.utils import timezone

from harness_site.api.tokens import token_create

PROBLEM = "application/problem+json"


class Api:
    """A Django test client speaking JSON with a Bearer token."""

    def __init__(self, token: str | None = None, client: Client | None = None):
        self.client = client or Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def _send(self, method: str, path: str, body=None, **headers):
        kwargs = {**self.headers, **headers}
        if body is not None:
            kwargs["data"] = body if isinstance(body, str | bytes) else json.dumps(body)
            kwargs["content_type"] = kwargs.pop("content_type", "application/json")
        return getattr(self.client, method)(path, **kwargs)

    def get(self, path, **params):
        return self.client.get(path, params, **self.headers)

    def post(self, path, body=None, **headers):
        return self._send("post", path, {} if body is None else body, **headers)

    def put(self, path, body=None, **headers):
        return self._send("put", path, {} if body is None else body, **headers)

    def patch(self, path, body=None, **headers):
        return self._send("patch", path, body, **headers)

    def delete(self, path, **headers):
        return self._send("delete", path, None, **headers)


def api_for(user, *, scopes=None) -> Api:
    return Api(token_create(name=f"t-{user.username}", user=user, now=timezone.now(), scopes=scopes))


def assert_problem(response, status: int, *, field: str | None = None, code: str | None = None) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith(PROBLEM), response["Content-Type"]
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"] and body["type"].startswith("urn:")
    if field is not None:
        assert body["field"] == field, body
        assert any(e["field"] == field for e in body["errors"]), body
    if code is not None:
        assert body["type"].endswith(":" + code), body
    return body
