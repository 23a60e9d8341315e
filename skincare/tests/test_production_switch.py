"""One production switch that cannot be misspelt, and refusals that fail closed.

``DJANGO_ENV`` is ``production`` or ``development``; anything else refuses to start and nothing at all is production
(config/modes.py). Production runs Django's deployment checks at every start-up and refuses weak secrets. The
demo-account check blocks serving until it has run against the database, and covers django-admin too. Every
refusal here has its control: the same start with real values runs."""

import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import RequestFactory

from config import modes
from skincare import checks, demo
from skincare.tests.test_production import ROOT, manage, production_env

PRINT_MODE = "import django; django.setup(); from django.conf import settings; print(settings.PRODUCTION)"


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.run(  # noqa: S603 - our own code
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("spelling", ["prod", "Production", "PRODUCTION", "production ", "", "dev", "staging"])
def test_an_unknown_mode_refuses_to_start(spelling: str) -> None:
    env = production_env()
    env["DJANGO_ENV"] = spelling  # production_env drops empty values: set it after
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "is not a mode: refusing to start" in result.stderr, result.stderr


def test_no_mode_at_all_is_production() -> None:
    env = production_env(DJANGO_ENV="", DJANGO_READ_DOT_ENV_FILE="false")
    assert "DJANGO_ENV" not in env
    result = python(PRINT_MODE, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    # ... so the demo's key is refused without anyone saying "production"
    refused = manage("audit_inventory", env={**env, "DJANGO_SECRET_KEY": demo.DEMO_SECRET_KEY})
    assert refused.returncode != 0 and "skincare.E002" in refused.stderr, refused.stderr
    # Control: development must be asked for, and then it is development.
    asked = python(PRINT_MODE, {**env, "DJANGO_ENV": "development"})
    assert asked.stdout.strip() == "False", asked.stderr


def test_dot_env_switches_into_production_but_never_out(tmp_path: Path) -> None:
    dot_env = tmp_path / ".env"
    dot_env.write_text("# a comment\nDJANGO_ENV=development\n")
    assert modes.mode(dot_env, environ={}) == "development"  # the environment says nothing: .env asks
    assert modes.mode(dot_env, environ={"DJANGO_ENV": "production"}) == "production"  # never out of production
    dot_env.write_text('export DJANGO_ENV="production"\n')
    assert modes.mode(dot_env, environ={}) == "production"  # the hole: it used to be ignored
    dot_env.write_text("DJANGO_ENV=prod\n")
    with pytest.raises(ImproperlyConfigured, match="is not a mode"):
        modes.mode(dot_env, environ={})
    assert modes.mode(tmp_path / "missing", environ={}) == "production"
    assert modes.mode(None, environ={}) == "production"


def test_the_production_image_sets_production_and_runs_unprivileged() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    final_env = [line for line in dockerfile.splitlines() if line.startswith("ENV ") and "DJANGO_ENV=" in line]
    assert final_env and "DJANGO_ENV=production" in final_env[-1]
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # Run-time lines after the last USER: nothing switches back to root.
    assert dockerfile.rindex("USER ") > dockerfile.rindex("RUN ")
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "**/.env" in ignored and "**/.env.*" in ignored  # deploy/.env, not only the top-level one


KEY, WEBHOOK = "DJANGO_SECRET_KEY", "PAYMENT_WEBHOOK_SECRET"
WEAK = {
    "one-character secret key": ({KEY: "x"}, "security.W009"),
    "low-entropy secret key": ({KEY: "ab" * 40}, "security.W009"),
    "wildcard hosts": ({"DJANGO_ALLOWED_HOSTS": "*"}, "skincare.E021"),
    "HSTS off": ({"DJANGO_SECURE_HSTS_SECONDS": "0"}, "security.W004"),
    "one-character webhook secret": ({WEBHOOK: "a"}, "payments.E005"),
    "short webhook secret": ({WEBHOOK: string.ascii_letters[:20]}, "payments.E005"),
    "the test suite's metrics token": ({"METRICS_TOKEN": "scrape-token-for-tests"}, "skincare.E011"),
    "short metrics token": ({"METRICS_TOKEN": "tok"}, "skincare.E011"),
    "low-entropy metrics token": ({"METRICS_TOKEN": "a" * 64}, "skincare.E011"),
}


@pytest.mark.parametrize("weak", WEAK)
@pytest.mark.django_db
def test_production_refuses_weak_secrets_and_failed_deployment_checks(weak: str) -> None:
    overrides, code = WEAK[weak]
    env = production_env(**overrides)
    for result in (manage("audit_inventory", env=env), python("import config.wsgi", env)):
        assert result.returncode != 0, result.stdout
        assert code in result.stderr, result.stderr


PADDED = {KEY: (demo.DEMO_SECRET_KEY, "skincare.E002"), WEBHOOK: (demo.DEMO_WEBHOOK_SECRET, "payments.E003")}


@pytest.mark.parametrize("variable", PADDED)
@pytest.mark.django_db
def test_a_published_secret_with_surrounding_whitespace_is_still_refused(variable: str) -> None:
    """django-environ does not strip: the comparison must (skincare.demo.is_published)."""
    value, code = PADDED[variable]
    result = manage("audit_inventory", env=production_env(**{variable: f"  {value} "}))
    assert result.returncode != 0
    assert code in result.stderr, result.stderr


def django_admin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT)}
    return subprocess.run(  # noqa: S603 - the venv's django-admin
        [str(Path(sys.executable).parent / "django-admin"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_django_admin_refuses_like_manage_py() -> None:
    refused = django_admin("shell", "-c", "print('shell ran')", env=production_env(**{KEY: demo.TEST_SECRET_KEY}))
    assert refused.returncode != 0
    assert "skincare.E002" in refused.stderr and "shell ran" not in refused.stdout
    call_command("load_demo_data")
    demo_accounts = django_admin("audit_inventory", env=production_env())
    assert demo_accounts.returncode != 0 and "skincare.E003" in demo_accounts.stderr, demo_accounts.stderr
    call_command("remove_demo_data")
    # Control: real values, no demo accounts.
    ran = django_admin("shell", "-c", "print('shell ran')", env=production_env())
    assert ran.returncode == 0, ran.stderr
    assert "shell ran" in ran.stdout


DEAD_DATABASE = "postgres://nobody@127.0.0.1:9/nowhere?connect_timeout=2"

BOOT_WHILE_DOWN = """
import json
import config.wsgi  # boots: the check could not run, so nothing is served until it has
from django.test import Client
c = Client(HTTP_HOST="shop.example", HTTP_X_FORWARDED_PROTO="https")
out = {}
for path in ("/healthz", "/readyz", "/v1/products"):
    r = c.get(path)
    out[path] = [r.status_code, r.json().get("code"), r.json().get("error", "")]
print(json.dumps(out))
"""


def test_a_worker_booted_while_the_database_is_down_serves_nothing_until_the_check_has_run() -> None:
    result = python(BOOT_WHILE_DOWN, production_env(DATABASE_URL=DEAD_DATABASE))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["/healthz"][0] == 200  # liveness: the process is up
    for path in ("/readyz", "/v1/products"):
        status, code, message = seen[path]
        assert (status, code) == (503, "database_unavailable"), seen
        assert "demo-account check" in message  # readiness says why
    # A command run while the database is down refuses instead of skipping the check.
    command = manage("audit_inventory", env=production_env(DATABASE_URL=DEAD_DATABASE))
    assert command.returncode != 0 and checks.DEMO_CHECK_NOT_RUN in command.stderr, command.stderr


def _outage(request: HttpRequest) -> HttpResponse:
    response = JsonResponse({"error": "down", "code": "database_unavailable"}, status=503)
    response["Retry-After"] = "2"
    return response


def _ok(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@pytest.fixture
def gate_state():  # type: ignore[no-untyped-def]
    verified, reason = checks.demo_gate.verified, checks.demo_gate.reason
    yield checks.demo_gate
    checks.demo_gate.verified, checks.demo_gate.reason = verified, reason


@pytest.mark.django_db
def test_the_check_runs_again_after_an_outage_and_refuses_demo_accounts(gate_state) -> None:  # type: ignore[no-untyped-def]
    request = RequestFactory().get("/v1/products")
    gate_state.passed()
    assert checks.DemoAccountGate(_ok)(request).status_code == 200
    # A request of this worker meets an outage; the database that comes back (a failover) has the demo accounts.
    assert checks.DemoAccountGate(_outage)(request).status_code == 503
    assert not gate_state.verified
    call_command("load_demo_data")
    refused = checks.DemoAccountGate(_ok)(request)
    assert refused.status_code == 503
    assert json.loads(refused.content)["code"] == "demo_accounts_present"
    assert checks.DemoAccountGate(_ok)(RequestFactory().get("/readyz")).status_code == 503
    assert checks.DemoAccountGate(_ok)(RequestFactory().get("/healthz")).status_code == 200
    # Control: once they are removed, the next request runs the check again and is served.
    call_command("remove_demo_data")
    assert get_user_model().objects.filter(username__in=demo.DEMO_USERS, is_active=True).count() == 0
    assert checks.DemoAccountGate(_ok)(request).status_code == 200
    assert gate_state.verified
