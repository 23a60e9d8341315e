"""docker-compose.yml is checked against the code (no Docker engine needed): every variable our containers are
given is read by the code, every command and its options exist, every port matches what the process listens on,
and the file sets no secret of its own."""

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from django.core.management import get_commands, load_command_class
from django.urls import resolve

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
OURS = [name for name, spec in SERVICES.items() if spec.get("build") == "."]
INTERPOLATION = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN")


def code_text() -> str:
    files = [*ROOT.glob("*/*.py"), *ROOT.glob("*/management/commands/*.py"), *ROOT.glob("deploy/**/*.sh")]
    return "\n".join(p.read_text() for p in files if ".venv" not in p.parts and "tests" not in p.parts)


def resolved(value: object) -> str:
    """A compose value with ``${VAR:-default}`` → default and ``${VAR:?msg}`` (required) → ``required``."""
    return INTERPOLATION.sub(lambda m: m.group(3) if m.group(2) == "-" else "required", str(value))


def words(command: object) -> list[str]:
    return [str(w) for w in command] if isinstance(command, list) else shlex.split(str(command))


def check_manage_py(args: list[str]) -> None:
    """``manage.py <command> [options]``: the command exists and its parser accepts the options."""
    name, options = args[0], args[1:]
    commands = get_commands()
    assert name in commands, f"manage.py {name}: no such command"
    command = load_command_class(commands[name], name)
    command.create_parser("manage.py", name).parse_args(options)


def check_gunicorn(args: list[str]) -> None:
    config = args[args.index("-c") + 1]
    assert (ROOT / config).is_file(), config
    module, _, attribute = args[-1].partition(":")
    assert hasattr(__import__(module, fromlist=[attribute]), attribute), args[-1]


def check_shell_script(path: str) -> None:
    script = (ROOT / path).read_text()
    assert (ROOT / path).is_file()
    for line in script.splitlines():
        parts = shlex.split(line.strip().removeprefix("exec ")) if line.strip() and not line.startswith("#") else []
        if parts[:2] == ["python", "manage.py"]:
            check_manage_py(parts[2:])
        elif parts[:1] == ["gunicorn"]:
            check_gunicorn(parts)


@pytest.mark.parametrize("service", OURS)
def test_every_variable_given_to_our_containers_is_read_by_the_code(service: str) -> None:
    text = code_text()
    for name in SERVICES[service].get("environment", {}):
        assert f'"{name}"' in text or f"${{{name}" in text or f"'{name}'" in text, f"{service}: {name} is never read"


@pytest.mark.parametrize("service", OURS)
def test_every_command_exists_with_its_options(service: str) -> None:
    command = words(SERVICES[service]["command"])
    if command[:2] == ["python", "manage.py"]:
        check_manage_py(command[2:])
    elif command[0] == "sh":
        check_shell_script(command[1])
    else:
        raise AssertionError(f"{service}: unexpected command {command}")


def test_ports_match_what_the_processes_listen_on() -> None:
    web, sweeper = SERVICES["web"], SERVICES["sweeper"]
    assert [p.rsplit(":", 1)[1] for p in web["ports"]] == [resolved(web["environment"]["PORT"])]
    assert web["environment"]["HOST"] == "0.0.0.0"  # noqa: S104 - inside the container, published on loopback
    sweeper_command = words(sweeper["command"])
    metrics_port = sweeper_command[sweeper_command.index("--metrics-port") + 1]
    assert [p.rsplit(":", 1)[1] for p in sweeper["ports"]] == [metrics_port]
    assert sweeper_command[sweeper_command.index("--metrics-addr") + 1] == "0.0.0.0"  # noqa: S104
    # Both reach PostgreSQL through PgBouncer, on the port its ini listens on, in transaction mode.
    ini = (ROOT / SERVICES["pgbouncer"]["build"] / "pgbouncer.ini").read_text()
    listen_port = re.search(r"^listen_port\s*=\s*(\d+)", ini, re.M).group(1)  # type: ignore[union-attr]
    assert re.search(r"^pool_mode\s*=\s*transaction$", ini, re.M)
    for service in OURS:
        env = SERVICES[service]["environment"]
        url = urlparse(resolved(env["DATABASE_URL"]))
        assert (url.hostname, str(url.port)) == ("pgbouncer", listen_port), service
        assert env["DB_PGBOUNCER"] == "true", service


def test_healthcheck_probes_exist() -> None:
    probe = " ".join(words(SERVICES["web"]["healthcheck"]["test"]))
    path = re.search(r"http://127\.0\.0\.1:8000(/\w+)", probe).group(1)  # type: ignore[union-attr]
    assert resolve(path).url_name == "readyz"


def test_pgbouncer_image_reads_only_what_compose_gives_it() -> None:
    spec = SERVICES["pgbouncer"]
    entrypoint = (ROOT / spec["build"] / "entrypoint.sh").read_text()
    for name in spec["environment"]:
        assert f"${{{name}" in entrypoint, name


def test_no_secret_is_set_by_the_file_itself() -> None:
    """Secrets are required from the environment (``${VAR:?...}``) or default to empty (``${VAR:-}``)."""
    for service, spec in SERVICES.items():
        for name, value in spec.get("environment", {}).items():
            text = str(value)
            if any(word in name for word in SECRET_WORDS):
                match = INTERPOLATION.fullmatch(text)
                assert match is not None, f"{service}: {name} must come from the environment"
                assert match.group(2) == "?" or (match.group(2) == "-" and match.group(3) == ""), (service, name)
            if name == "DATABASE_URL":
                password = re.fullmatch(r"postgres://[^:@]+:(.+)@[\w.-]+:\d+/\w+", text)
                assert password is not None and INTERPOLATION.fullmatch(password.group(1)), service


def test_demo_data_is_loaded_only_when_asked() -> None:
    web = SERVICES["web"]
    assert resolved(web["environment"]["LOAD_DEMO_DATA"]) == "false"
    script = (ROOT / words(web["command"])[1]).read_text()
    assert 'if [ "${LOAD_DEMO_DATA:-false}" = "true" ]; then' in script
    assert "load_demo_data" not in " ".join(words(web["command"]))


@pytest.mark.parametrize("name", [".env", ".env.production", ".env.local"])
def test_env_files_with_secrets_reach_neither_git_nor_the_image(name: str) -> None:
    """docker-compose reads secrets from .env, and `make run` writes one with the demo values: git ignores them and
    the Docker build context leaves them out (the Dockerfile copies the whole tree)."""
    import fnmatch
    import subprocess

    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=ROOT, check=False)  # noqa: S603, S607
    assert ignored.returncode == 0, f"{name} is not ignored by git"
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert any(fnmatch.fnmatch(name, p) for p in patterns if p and not p.startswith("#")), name
    assert "COPY . ." in (ROOT / "Dockerfile").read_text()  # why it matters
