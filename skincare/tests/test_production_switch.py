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


def test_only_the_environment_selects_development_whatever_dot_env_says(tmp_path: Path) -> None:
    dot_env = tmp_path / ".env"
    dot_env.write_text("# a comment\nDJANGO_ENV=development\nDJANGO_SECRET_KEY=x\n")
    # The hole: a process started without DJANGO_ENV ran development whenever .env said so.
    assert modes.mode(dot_env, environ={}) == "production"
    dot_env.write_text('export DJANGO_ENV="development"\n')
    assert modes.mode(dot_env, environ={}) == "production"
    assert modes.mode(dot_env, environ={"DJANGO_ENV": "production"}) == "production"
    # Control: the environment asks, and then .env may carry development values.
    assert modes.mode(dot_env, environ={"DJANGO_ENV": "development"}) == "development"
    assert modes.mode(tmp_path / "missing", environ={"DJANGO_ENV": "development"}) == "development"
    assert modes.mode(None, environ={}) == "production"


def test_a_dot_env_line_that_contradicts_development_refuses(tmp_path: Path) -> None:
    dot_env = tmp_path / ".env"
    development = {"DJANGO_ENV": "development"}
    # An appended production line: the last line counts, and it contradicts the environment.
    dot_env.write_text("DJANGO_ENV=development\nPAYMENT_SANDBOX=true\nDJANGO_ENV=production\n")
    with pytest.raises(ImproperlyConfigured, match="contradicts DJANGO_ENV='development' in the environment"):
        modes.mode(dot_env, environ=development)
    dot_env.write_text("DJANGO_ENV=prod\n")
    with pytest.raises(ImproperlyConfigured, match=r"'prod'.*contradicts"):
        modes.mode(dot_env, environ=development)
    # Control: the last line agrees (an earlier production line was replaced by a later development one).
    dot_env.write_text("DJANGO_ENV=production\nDJANGO_ENV=development\n")
    assert modes.mode(dot_env, environ=development) == "development"
    # Production never reads .env: whatever it says, it is not asked.
    dot_env.write_text("DJANGO_ENV=development\n")
    assert modes.mode(dot_env, environ={"DJANGO_ENV": "production"}) == "production"


@pytest.mark.parametrize(
    "line", ["export DJANGO_ENV=production", "  export   DJANGO_ENV = 'production'", "export\tDJANGO_ENV=staging"]
)
def test_an_exported_django_env_line_in_dot_env_is_read_like_a_bare_one(tmp_path: Path, line: str) -> None:
    """A shell-style ``export`` line that contradicts the environment refuses, as the bare line does."""
    dot_env = tmp_path / ".env"
    dot_env.write_text(f"DJANGO_ENV=development\n{line}\n")
    with pytest.raises(ImproperlyConfigured, match="contradicts DJANGO_ENV='development' in the environment"):
        modes.mode(dot_env, environ={"DJANGO_ENV": "development"})
    # Control: the same file with the export line agreeing starts.
    dot_env.write_text("DJANGO_ENV=production\nexport DJANGO_ENV=development\n")
    assert modes.mode(dot_env, environ={"DJANGO_ENV": "development"}) == "development"


@pytest.mark.parametrize("line", ["export DJANGO_ENV", "DJANGO_ENV: production", "set DJANGO_ENV production"])
def test_a_dot_env_line_naming_django_env_in_another_shape_refuses_rather_than_being_skipped(
    tmp_path: Path, line: str
) -> None:
    dot_env = tmp_path / ".env"
    dot_env.write_text(f"# DJANGO_ENV is chosen by the environment\nDJANGO_ENV=development\n{line}\n")
    with pytest.raises(ImproperlyConfigured, match=r"line 3 of .* names DJANGO_ENV but is not"):
        modes.mode(dot_env, environ={"DJANGO_ENV": "development"})


def test_a_process_without_django_env_is_production_and_says_how_to_ask_for_development() -> None:
    """The repository's own .env (make run's demo values) is there; nothing in the environment asks for
    development: the settings refuse as production, naming the way to development."""
    env = production_env(DJANGO_ENV="", DJANGO_SECRET_KEY="")
    result = python(PRINT_MODE, env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr, result.stderr
    assert "export DJANGO_ENV=development" in result.stderr, result.stderr
    # Control: asked for by the environment, the same start is development (with .env's values, or these).
    asked = python(PRINT_MODE, {**env, "DJANGO_ENV": "development", "DJANGO_SECRET_KEY": demo.TEST_SECRET_KEY})
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == "False"


MAKE_PRINT_MODE = ["make", "-s", "--no-print-directory", "--eval", 'print-mode: ; @echo "mode=$$DJANGO_ENV"']


def make_mode(*args: str, **env_mode: str) -> str:
    env = {k: v for k, v in production_env().items() if k != "DJANGO_ENV"} | env_mode
    result = subprocess.run(  # noqa: S603
        [*MAKE_PRINT_MODE, *args, "print-mode"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_makefile_asks_for_development_only_when_no_mode_is_given() -> None:
    # The hole: `export DJANGO_ENV := development` overrode the environment's production.
    assert make_mode(DJANGO_ENV="production") == "mode=production"
    assert make_mode("DJANGO_ENV=production") == "mode=production"
    assert make_mode(DJANGO_ENV="prod") == "mode=prod"  # passed on as given: the settings refuse it
    # Control: nothing said, the development targets ask for development.
    assert make_mode() == "mode=development"


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
    "one-character fallback key": ({"DJANGO_SECRET_KEY_FALLBACKS": "x"}, "security.W025"),
    "published fallback key": ({"DJANGO_SECRET_KEY_FALLBACKS": demo.DEMO_SECRET_KEY}, "skincare.E002"),
    "low-entropy secret key": ({KEY: "ab" * 40}, "security.W009"),
    "wildcard hosts": ({"DJANGO_ALLOWED_HOSTS": "*"}, "skincare.E021"),
    "HSTS off": ({"DJANGO_SECURE_HSTS_SECONDS": "0"}, "security.W004"),
    "one-character webhook secret": ({WEBHOOK: "a"}, "payments.E005"),
    "short webhook secret": ({WEBHOOK: string.ascii_letters[:20]}, "payments.E005"),
    "the test suite's metrics token": ({"METRICS_TOKEN": "scrape-token-for-tests"}, "skincare.E011"),
    "short metrics token": ({"METRICS_TOKEN": "tok"}, "skincare.E011"),
    "low-entropy metrics token": ({"METRICS_TOKEN": "a" * 64}, "skincare.E011"),
    "trusted proxies wider than a private network": ({"TRUSTED_PROXIES": "10.0.3.0/24,0.0.0.0/0"}, "skincare.E013"),
    "trusted IPv6 proxies wider than a private network": ({"TRUSTED_PROXIES": "::/0"}, "skincare.E013"),
    "trusted IPv6 proxies of half the internet": ({"TRUSTED_PROXIES": "10.0.3.0/24,8000::/1"}, "skincare.E013"),
    "trusted public proxies as narrow as a private network": ({"TRUSTED_PROXIES": "203.0.113.0/24"}, "skincare.E013"),
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


PADDED_SHORT = {"skincare.E011": "METRICS_TOKEN", "payments.E005": "PAYMENT_WEBHOOK_SECRET"}  # code: setting


@pytest.mark.parametrize("code", PADDED_SHORT)
@pytest.mark.django_db
def test_a_short_secret_padded_with_whitespace_is_still_short(settings, code: str) -> None:  # type: ignore[no-untyped-def]
    """The length is the stripped value's: a 20-character secret padded to 40 is still 20 characters."""
    short = string.ascii_letters[:20]
    assert checks.weak_secret(f"{' ' * 10}{short}{' ' * 10}") == "20 characters (at least 32 are required)"
    settings.PRODUCTION, settings.METRICS_TOKEN = True, ""
    settings.PAYMENT_WEBHOOK_SECRET, settings.PAYMENT_SANDBOX = string.ascii_letters[:40], False
    setattr(settings, PADDED_SHORT[code], f"{' ' * 10}{short}{' ' * 10}")
    assert code in "\n".join(checks.production_refusals())
    # Control: 32 characters of the same alphabet, padded alike, are long enough.
    setattr(settings, PADDED_SHORT[code], f"  {string.ascii_letters[:32]}  ")
    assert code not in "\n".join(checks.production_refusals())


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
