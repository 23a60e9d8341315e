"""The production switch: ``DJANGO_ENV`` is ``production`` or ``development``, nothing else.

Fail closed: an unknown value (``prod``, ``Production``, an empty string, a stray space) refuses to start, and no
value at all is production, so a process runs in development only when something asked for it. The process
environment decides; only when it has no ``DJANGO_ENV`` is the ``DJANGO_ENV=`` line of the repository's ``.env``
read (`make run` writes ``development`` there for the commands typed beside it). ``.env`` can therefore switch a
process into production but never out of it: with ``DJANGO_ENV=production`` in the environment the file is not read
at all. The production image sets ``DJANGO_ENV=production`` itself (``Dockerfile``).

Plain functions only: ``config.settings`` calls this before Django is set up.
"""

import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

PRODUCTION = "production"
DEVELOPMENT = "development"
MODES = (PRODUCTION, DEVELOPMENT)
VARIABLE = "DJANGO_ENV"
_LINE = re.compile(r"^\s*(?:export\s+)?DJANGO_ENV\s*=\s*(.*?)\s*$")


def dot_env_value(path: Path | None) -> str | None:
    """The value of the last ``DJANGO_ENV=`` line of ``path`` (quotes removed), or None (no file, no line)."""
    if path is None:
        return None
    try:
        text = path.read_text()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    value = None
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            value = match.group(1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
    return value


def mode(dot_env: Path | None, environ: dict[str, str] | None = None) -> str:
    """``production`` or ``development``; raises ImproperlyConfigured for any other value."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    source = "the environment"
    value = environ.get(VARIABLE)
    if value is None:
        source = str(dot_env)
        value = dot_env_value(dot_env)
    if value is None:
        return PRODUCTION  # nothing asked for development
    if value not in MODES:
        raise ImproperlyConfigured(
            f"{VARIABLE}={value!r} (from {source}) is not a mode: refusing to start. It must be exactly "
            f"{PRODUCTION!r} or {DEVELOPMENT!r} (unset is {PRODUCTION!r})."
        )
    return value


def production(dot_env: Path | None) -> bool:
    """``dot_env``: the .env file whose DJANGO_ENV line counts when the environment has none (None: no file)."""
    return mode(dot_env) == PRODUCTION
