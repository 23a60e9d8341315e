"""Production refuses the demo: with DJANGO_ENV=production every start-up — the web application (what
gunicorn imports), the sweeper, any management command, even one that skips Django's system checks — stops with a
clear message when the secret key or the webhook secret is a published value, the sandbox is on, or the database has
the demo accounts; `load_demo_data` refuses. Each refusal has its control: the same start-up with real values runs.

Every process here is a fresh one with a production environment (skincare/tests/test_production.py's
``production_env``) against the test database."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from skincare import demo
from skincare.tests.test_production import ROOT, manage, production_env

WSGI = "import config.wsgi"  # what gunicorn does first: config/wsgi.py runs the start-up checks
SHELL_COMMAND = ("shell", "-c", "print('shell ran')")  # a command that runs no system checks of its own


def web(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own application module
        [sys.executable, "-c", WSGI], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


# Each way to start, as a function of the environment. The sweeper's one pass and its loop start the same way.
STARTS = {
    "web": web,
    "sweeper": lambda env: manage("expire_reservations", "--loop", "--interval", "0.1", env=env),
    "command": lambda env: manage("audit_inventory", env=env),
    "command without system checks": lambda env: manage(*SHELL_COMMAND, env=env),
}
REFUSALS = {
    "demo secret key": ({"DJANGO_SECRET_KEY": demo.DEMO_SECRET_KEY}, "skincare.E002"),
    "test secret key": ({"DJANGO_SECRET_KEY": demo.TEST_SECRET_KEY}, "skincare.E002"),
    "demo webhook secret": ({"PAYMENT_WEBHOOK_SECRET": demo.DEMO_WEBHOOK_SECRET}, "payments.E003"),
    "bench webhook secret": ({"PAYMENT_WEBHOOK_SECRET": demo.BENCH_WEBHOOK_SECRET}, "payments.E003"),
    "sandbox, even with the demo opt-in": (
        {"PAYMENT_SANDBOX": "true", "PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG": "true"},
        "payments.E004",
    ),
}


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("refusal", REFUSALS)
@pytest.mark.django_db
def test_production_refuses_a_published_value_or_the_sandbox(start: str, refusal: str) -> None:
    overrides, code = REFUSALS[refusal]
    result = STARTS[start](production_env(**overrides))
    assert result.returncode != 0, result.stdout
    assert code in result.stderr, result.stderr


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.django_db
def test_control_the_same_start_ups_run_with_real_values(start: str) -> None:
    env = production_env()
    # The sweeper's loop would run for ever with real values: one pass.
    result = manage("expire_reservations", env=env) if start == "sweeper" else STARTS[start](env)
    assert result.returncode == 0, result.stderr
    assert "E00" not in result.stderr
    if start == "command without system checks":
        assert "shell ran" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_production_refuses_a_database_with_the_demo_accounts_until_they_are_removed() -> None:
    call_command("load_demo_data")  # committed: the child processes see it
    env = production_env()

    for start in STARTS.values():
        result = start(env)
        assert result.returncode != 0
        assert "skincare.E003" in result.stderr, result.stderr
        assert "remove_demo_data" in result.stderr  # the message says the way out

    removed = manage("remove_demo_data", env=env)  # the way out runs in the refused production
    assert removed.returncode == 0, removed.stderr
    assert "deactivated" in removed.stdout and demo.DEMO_CUSTOMER_TOKEN in removed.stdout

    # Control: the same start-ups now run, and the demo token is gone for good.
    assert web(env).returncode == 0
    assert manage("audit_inventory", env=env).returncode == 0
    assert manage(*SHELL_COMMAND, env=env).returncode == 0
    again = manage("remove_demo_data", env=env)
    assert (again.returncode, again.stdout.strip()) == (0, "no demo accounts")


@pytest.mark.django_db(transaction=True)
def test_a_revoked_demo_token_alone_is_not_an_account() -> None:
    """The check counts what can be used: an active demo user or a live demo token (not a revoked row)."""
    from django.contrib.auth import get_user_model

    from skincare import services

    other = get_user_model().objects.create(username="not-a-demo-user")
    services.api_token_issue(user=other, token=demo.DEMO_CUSTOMER_TOKEN)
    env = production_env()
    assert "skincare.E003" in manage("audit_inventory", env=env).stderr  # a live demo token under any name
    services.api_tokens_revoke(user=other)
    assert manage("audit_inventory", env=env).returncode == 0


@pytest.mark.django_db(transaction=True)
def test_load_demo_data_refuses_in_production() -> None:
    from django.contrib.auth import get_user_model

    result = manage("load_demo_data", env=production_env())
    assert result.returncode != 0
    assert "refusing to load the demo data with DJANGO_ENV=production" in result.stderr
    assert not get_user_model().objects.filter(username__in=demo.DEMO_USERS).exists()
    # Control: outside production it loads (the manage.py of `make run`).
    development = manage(
        "load_demo_data", env=production_env(DJANGO_ENV="development", DJANGO_SECRET_KEY=demo.DEMO_SECRET_KEY)
    )
    assert development.returncode == 0, development.stderr
    assert get_user_model().objects.filter(username__in=demo.DEMO_USERS).count() == 2


def test_a_configuration_error_is_a_message_not_a_traceback() -> None:
    result = manage("check", env=production_env(DJANGO_SECRET_KEY=""))
    assert result.returncode != 0
    assert result.stderr.startswith("manage.py: DJANGO_SECRET_KEY is not set"), result.stderr
    assert "Traceback" not in result.stderr


# Values given to a secret anywhere in the repository: assignments to *SECRET*/*_KEY* names, secret= arguments,
# environment entries and shell/Makefile/Dockerfile assignments of DJANGO_SECRET_KEY / PAYMENT_WEBHOOK_SECRET.
SECRET_LITERALS = [
    re.compile(r"""\b\w*SECRET\w*\s*=\s*["']([^"'$]{3,})["']"""),
    re.compile(r"""\bsecret\s*=\s*["']([^"'$]{3,})["']"""),
    re.compile(r"""["'](?:DJANGO_SECRET_KEY|PAYMENT_WEBHOOK_SECRET)["']\s*:\s*["']([^"'$]{3,})["']"""),
    re.compile(r"""setdefault\(\s*["'](?:DJANGO_SECRET_KEY|PAYMENT_WEBHOOK_SECRET)["'],\s*["']([^"'$]{3,})["']"""),
    re.compile(r"""\b(?:DJANGO_SECRET_KEY|PAYMENT_WEBHOOK_SECRET)=([A-Za-z0-9][^\s"'$;]{2,})"""),
]
NOT_SCANNED = {".venv", ".git", ".data", "node_modules", "staticfiles", "bench-results"}


def repository_files() -> list[Path]:
    names = ("*.py", "*.md", "*.sh", "*.yml", "*.toml", "*.conf", "Makefile", "Dockerfile", "Procfile")
    return [
        path
        for pattern in names
        for path in ROOT.rglob(pattern)
        if not NOT_SCANNED.intersection(path.relative_to(ROOT).parts) and path.name != "test_production_refuses_demo.py"
    ]


def test_every_secret_value_in_the_repository_is_in_the_one_published_list() -> None:
    found: dict[str, str] = {}
    for path in repository_files():
        for pattern in SECRET_LITERALS:
            for match in pattern.finditer(path.read_text(errors="replace")):
                found.setdefault(match.group(1), str(path.relative_to(ROOT)))
    assert found, "the scan must see the demo values at least"
    assert demo.DEMO_SECRET_KEY in found and demo.DEMO_WEBHOOK_SECRET in found
    unlisted = {value: where for value, where in found.items() if not demo.is_published(value)}
    assert unlisted == {}, "add these to skincare/demo.py PUBLISHED_SECRETS (or stop publishing them)"
