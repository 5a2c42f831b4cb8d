"""API test helpers: tokens for the conftest users, and a client that sends them."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """Each test stores uploaded files in its own directory."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture
def issue():
    """issue(user, "read", "submit", expires_at=None) -> the secret of a new token."""
    from portal.api.tokens import issue_token

    def make(user, *scopes: str, expires_at=None, name: str = "test") -> str:
        return issue_token(user, name=name, scopes=scopes or ("read", "submit"), expires_at=expires_at)[1]

    return make


class Api:
    """The Django test client speaking JSON with a bearer token."""

    def __init__(self, client, token: str | None) -> None:
        self.client, self.token = client, token

    def _headers(self, headers: dict | None) -> dict:
        result = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        result.update(headers or {})
        return result

    def get(self, path: str, data: dict | None = None, headers: dict | None = None):
        return self.client.get(path, data or {}, headers=self._headers(headers))

    def post(self, path: str, body=None, headers: dict | None = None):
        return self.client.post(path, json.dumps(body if body is not None else {}), content_type="application/json",
                                headers=self._headers(headers))

    def upload(self, path: str, data: dict, headers: dict | None = None):
        return self.client.post(path, data, headers=self._headers(headers))


@pytest.fixture
def api_as(client, issue):
    """api_as(user, *scopes) -> an Api client with a fresh token of that user."""

    def make(user, *scopes: str) -> Api:
        return Api(client, issue(user, *scopes))

    return make


@pytest.fixture
def alice_api(local_site, api_as) -> Api:
    return api_as(local_site.alice, "read", "submit")


@pytest.fixture
def mallory_api(local_site, api_as) -> Api:
    return api_as(local_site.mallory, "read", "submit")


def job_body(**fields) -> dict:
    body = {"project": "vision", "name": "hello", "hardware": "local-cpu", "nodes": 1, "walltime": "00:10:00",
            "script": "echo hello\n"}
    body.update(fields)
    return body


def notebook(source: str = "print(lr)") -> dict:
    """A minimal valid nbformat 4 notebook with a parameters cell."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {"cell_type": "code", "id": "params", "metadata": {"tags": ["parameters"]}, "execution_count": None,
             "outputs": [], "source": "lr = 0.1\nepochs = 1\nmodel = 'cnn'\nlayers = [64]"},
            {"cell_type": "code", "id": "body", "metadata": {}, "execution_count": None, "outputs": [], "source": source},
        ],
    }
