"""Admin building blocks shared by every app (the neutral place: apps import from here, never from each other's
admin modules for these).

* :class:`ReadOnlyAdminMixin` / :class:`ReadOnlyInline`: visible to users with the view permission, writable by
  nobody (stock counters, the ledger, reservations and payment records are only ever written by services).

A higher app that shows more on a lower app's admin page (orders' filter on the stock counters, payments' inline on
the order page) subclasses that admin and registers the subclass in its place, in its own ``admin.py``: that
module imports the lower one, so the lower registration always comes first, whatever ``INSTALLED_APPS`` says.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """Visible to users with the view permission; nobody can add, change or delete through the admin."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    max_num = 0
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields or [f.name for f in self.model._meta.fields]
