"""The production switch: ``DJANGO_ENV`` is ``production`` or ``development``, nothing else.

Fail closed: an unknown value (``prod``, ``Production``, an empty string, a stray space) refuses to start, and no
value at all is production, so a process runs in development only when its own environment asked for it. Only the
process environment selects the mode: a ``DJANGO_ENV`` line of the repository's ``.env`` never does, so a process
started without ``DJANGO_ENV`` is production whatever ``.env`` says (`make run` and `make test` export
``development`` themselves; the commands typed beside them export it too, README's "Try it"). In development the
file may still carry development values; when it has a ``DJANGO_ENV=`` line, its last one must say ``development``
too: one that says anything else refuses to start (an appended ``production`` line is a mistake to stop at, not a
line to ignore). A shell's ``export DJANGO_ENV=...`` counts like the bare line, and a line that names ``DJANGO_ENV``
in any other shape (``export DJANGO_ENV``, ``DJANGO_ENV: production``) refuses to start rather than be skipped.
Production never reads ``.env``. The production image sets ``DJANGO_ENV=production`` itself
(``Dockerfile``).

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
_NAMED = re.compile(r"^\s*(?!#).*\bDJANGO_ENV\b")  # a line (not a comment) that names the variable


def dot_env_value(path: Path | None) -> str | None:
    """The value of the last ``DJANGO_ENV=`` (or ``export DJANGO_ENV=``) line of ``path`` (quotes removed), or None
    (no file, no line); ImproperlyConfigured for a line that names the variable in another shape."""
    if path is None:
        return None
    try:
        text = path.read_text()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    value = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.match(line)
        if match is None and _NAMED.match(line):
            raise ImproperlyConfigured(
                f"line {number} of {path} names {VARIABLE} but is not `{VARIABLE}=value`: refusing to start rather "
                f"than skip it. Write it as `{VARIABLE}=...` or remove it (only the environment selects the mode)."
            )
        if match:
            value = match.group(1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
    return value


def mode(dot_env: Path | None, environ: dict[str, str] | None = None) -> str:
    """``production`` or ``development``, from the process environment only; raises ImproperlyConfigured for any
    other value, and in development for a ``dot_env`` whose ``DJANGO_ENV`` line says anything but development."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    value = environ.get(VARIABLE)
    if value is None:
        return PRODUCTION  # nothing asked for development; .env is not asked
    if value not in MODES:
        raise ImproperlyConfigured(
            f"{VARIABLE}={value!r} (from the environment) is not a mode: refusing to start. It must be exactly "
            f"{PRODUCTION!r} or {DEVELOPMENT!r} (unset is {PRODUCTION!r})."
        )
    if value == DEVELOPMENT:
        in_file = dot_env_value(dot_env)
        if in_file is not None and in_file != DEVELOPMENT:
            raise ImproperlyConfigured(
                f"{VARIABLE}={in_file!r} in {dot_env} contradicts {VARIABLE}={DEVELOPMENT!r} in the environment: "
                f"refusing to start. Only the environment selects the mode: for {PRODUCTION}, export "
                f"{VARIABLE}={PRODUCTION} (e.g. `{VARIABLE}={PRODUCTION} make run`); otherwise remove the line."
            )
    return value


def production(dot_env: Path | None) -> bool:
    """``dot_env``: the .env file a development process reads (None: no file); it never selects the mode."""
    return mode(dot_env) == PRODUCTION
