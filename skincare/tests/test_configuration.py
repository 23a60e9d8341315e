"""The operator's group of docs/configuration.md stays small, and a value a setting does not take refuses to start
(fail closed). That the doc lists exactly the variables the product reads is skincare/tests/test_generated_docs.py's
(the doc's tables are generated from config/variables.py)."""

import re
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
SETTINGS = ROOT / "config" / "settings.py"
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.M)
MAIN_GROUP_MAX_ROWS = 30


def documented(doc: str) -> dict[str, list[str]]:
    """Section (``## ``) -> the variables of its table rows."""
    sections: dict[str, list[str]] = {}
    for part in re.split(r"^## ", doc, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        sections[title.strip()] = ROW.findall(body)
    return sections


def test_the_operators_group_has_at_most_thirty_rows():
    sections = documented(DOC.read_text())
    assert len(sections["What an operator sets"]) <= MAIN_GROUP_MAX_ROWS


def test_control_the_rows_are_found():
    doc = "## A\n\n| variable |\n|---|\n| `ONE` | 1 |\n| `TWO` | 2 |\n## B\n| `THREE` | 3 |\n"
    assert documented(doc) == {"A": ["ONE", "TWO"], "B": ["THREE"]}


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS))


def test_the_settings_load_as_configured(monkeypatch: pytest.MonkeyPatch):
    values = _settings(monkeypatch, ACCESS_LOG="False", RESERVATION_TTL_SECONDS=" 60 ", LOG_FORMAT="plain")
    assert (values["ACCESS_LOG"], values["RESERVATION_TTL_SECONDS"], values["LOG_FORMAT"]) == (False, 60, "plain")


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("ACCESS_LOG", "yes", "ACCESS_LOG must be true or false"),
        ("DB_PGBOUNCER", "on", "DB_PGBOUNCER must be true or false"),
        ("RESERVATION_TTL_SECONDS", "30m", "RESERVATION_TTL_SECONDS must be a whole number"),
        ("QUEUE_ADMIT_PER_SECOND", "0", "QUEUE_ADMIT_PER_SECOND must be at least 1"),
        ("MAX_PENDING_ORDERS_PER_CUSTOMER", "-1", "MAX_PENDING_ORDERS_PER_CUSTOMER must be at least 0"),
        ("LOG_FORMAT", "jsno", "LOG_FORMAT must be one of json, plain"),
        ("PAYMENT_GATEWAY", "stripe", "PAYMENT_GATEWAY must be one of sandbox, midtrans"),
        ("LOG_LEVEL", "info", "LOG_LEVEL must be one of DEBUG, INFO"),
        ("SOLD_OUT_CACHE_MS", "1000", "SOLD_OUT_CACHE_MS must be 250"),
        ("DB_POOL", "true", "no longer settings: DB_POOL"),
        ("GUNICORN_WORKER_CLASS", "gthread", "no longer settings: GUNICORN_WORKER_CLASS"),
        ("WEB_THREADS", "1", "WEB_THREADS must be at least 2"),
        ("GATEWAY_MAX_CALLS", "4", "GATEWAY_MAX_CALLS (4) must be below WEB_THREADS (4)"),
    ],
)
def test_a_value_a_setting_does_not_take_refuses_to_start(monkeypatch, name, value, complaint):
    with pytest.raises(ImproperlyConfigured, match=re.escape(complaint)):
        _settings(monkeypatch, **{name: value})


def test_the_bulkhead_stays_below_the_threads_it_protects(monkeypatch: pytest.MonkeyPatch):
    assert _settings(monkeypatch)["GATEWAY_MAX_CALLS"] == 2  # unset: half of the default four threads
    assert _settings(monkeypatch, WEB_THREADS="8", GATEWAY_MAX_CALLS="7")["GATEWAY_MAX_CALLS"] == 7
    with pytest.raises(ImproperlyConfigured, match=re.escape("GATEWAY_MAX_CALLS (8) must be below WEB_THREADS (8)")):
        _settings(monkeypatch, WEB_THREADS="8", GATEWAY_MAX_CALLS="8")


def test_control_the_same_settings_without_the_bad_value_start(monkeypatch: pytest.MonkeyPatch):
    values = _settings(monkeypatch, ACCESS_LOG="true", LOG_FORMAT="json", SOLD_OUT_CACHE_MS="0")
    assert values["ACCESS_LOG"] is True
    assert values["SOLD_OUT_CACHE_MS"] == 0


def test_the_longest_poll_is_the_longest_the_admissions_ttl_allows(monkeypatch: pytest.MonkeyPatch):
    """Unset, QUEUE_POLL_MAX_SECONDS is half the admission's TTL less the counters' age and the shortest poll, so a
    client obeying poll_after learns of an admission with half its TTL left; a shorter TTL shortens it."""
    assert _settings(monkeypatch)["QUEUE_POLL_MAX_SECONDS"] == 120 // 2 - 1 - 1
    assert _settings(monkeypatch, ADMISSION_TTL_SECONDS="60")["QUEUE_POLL_MAX_SECONDS"] == 28
    with pytest.raises(ImproperlyConfigured, match="at most half ADMISSION_TTL_SECONDS"):
        _settings(monkeypatch, ADMISSION_TTL_SECONDS="120", QUEUE_POLL_MAX_SECONDS="59")


@pytest.mark.parametrize("value", ["idr", "Idr", "usd", "ID", "IDRR", " IDR", "I1R"])
def test_a_shop_currency_that_is_not_three_capital_letters_refuses_to_start(settings, value):  # type: ignore[no-untyped-def]
    """skincare.E012: a payment event's currency is compared with SHOP_CURRENCY as written, so ``idr`` would make
    every payment a mismatch."""
    from skincare.checks import shop_currency_setting

    settings.SHOP_CURRENCY = value
    assert [message.id for message in shop_currency_setting()] == ["skincare.E012"]
    settings.SHOP_CURRENCY = "IDR"  # control: the code in capitals starts
    assert shop_currency_setting() == []
