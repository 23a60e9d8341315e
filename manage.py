#!/usr/bin/env python
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def use_the_venv() -> None:
    """`python manage.py ...` with a Python that has no Django (a newcomer's system python): run this file again
    with the project's .venv/bin/python, which `make run` creates. The same process (exec), same arguments."""
    try:
        import django  # noqa: F401
    except ImportError:
        # sys.prefix, not the executable: the venv's python is often a symlink to the very same system binary.
        if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
            os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])  # noqa: S606 - this very file, same arguments
        sys.exit(f"manage.py: Django is not installed for {sys.executable}; run `make run` (creates .venv) first.")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    use_the_venv()
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # With DJANGO_ENV=production every command first refuses a published or weak secret, the sandbox, the demo
        # accounts (skincare.checks.refuse_in_production, run by the skincare app for django-admin too).
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:  # a configuration error is a message, not a traceback
        sys.exit(f"manage.py: {exc}")


if __name__ == "__main__":
    main()
