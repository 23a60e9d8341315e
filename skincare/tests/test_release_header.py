"""Every answer names the release that gave it (``X-Release`` from ``RELEASE_ID``): what lets a client, and
``make deploy-rehearsal``, see a rolling release arrive. A value that cannot be a header's refuses to start."""

import re
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"


@pytest.mark.parametrize("path", ["/healthz", "/v1/checkout", "/v1/no-such-thing"])
def test_every_answer_names_the_release(client, path):
    with override_settings(RELEASE_ID="2026.12.03-ab12"):
        response = client.get(path)
    assert response["X-Release"] == "2026.12.03-ab12"


def test_control_without_a_release_no_header(client):
    with override_settings(RELEASE_ID=""):
        assert "X-Release" not in client.get("/healthz")


@pytest.mark.parametrize("value", ["v1 two", "v1\r\nSet-Cookie: x=1", "-leading", "x" * 65, "café"])
def test_a_release_that_cannot_be_a_header_refuses_to_start(monkeypatch, value):
    monkeypatch.setenv("RELEASE_ID", value)
    with pytest.raises(ImproperlyConfigured, match=re.escape("RELEASE_ID must be letters, digits")):
        runpy.run_path(str(SETTINGS))


def test_control_a_release_label_starts(monkeypatch):
    monkeypatch.setenv("RELEASE_ID", " v2.4.1+build_7 ")
    assert runpy.run_path(str(SETTINGS))["RELEASE_ID"] == "v2.4.1+build_7"
