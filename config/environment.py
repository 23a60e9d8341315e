"""The readers of the environment that settings and gunicorn's conf share: a value that is not one the variable
takes refuses to start (fail closed): ``yes`` is not a boolean, ``20s`` is not a number. Plain functions: both
callers run before Django is set up."""

import os

from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool) -> bool:
    """``true`` or ``false`` (any case); unset or empty is ``default``; anything else refuses to start."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise ImproperlyConfigured(f"{name} must be true or false, not {os.environ[name]!r}")
    return value == "true"


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number, at least ``minimum``; unset or empty is ``default``; anything else refuses to start."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (exactly); unset or empty is ``default``; anything else refuses to start."""
    value = os.environ.get(name, "").strip() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def web_threads() -> int:
    """WEB_THREADS: the requests one web worker serves at once (gunicorn's gthread threads, config/gunicorn.conf.py).
    Read here for gunicorn, the settings (the bulkhead stays below it) and the front's per-instance limit."""
    return env_int("WEB_THREADS", 4, minimum=2)
