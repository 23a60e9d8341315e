"""Admin building blocks shared by every app (the neutral place: apps import from here, never from each other's
admin modules for these).

* :class:`ReadOnlyAdminMixin` / :class:`ReadOnlyInline`: visible to users with the view permission, writable by
  nobody (stock counters, the ledger, reservations and payment records are only ever written by services).
* :class:`ExtensibleAdmin`: an admin that a higher app extends in place (one more list filter, one more inline)
  instead of unregistering and re-registering it, so the result does not depend on ``INSTALLED_APPS`` order
  and the lower app never imports the higher one.
"""

from typing import Any, ClassVar

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


class ExtensibleAdmin(admin.ModelAdmin):
    """A ModelAdmin with two extension points for apps above the model's own app.

    ``SomeAdmin.extend(list_filter=[...], inlines=[...])`` (called from the higher app's ``admin.py``) adds to
    what every request sees. Registration happens once, in the model's own app.
    """

    extra_list_filter: ClassVar[list[Any]]
    extra_inlines: ClassVar[list[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.extra_list_filter = []
        cls.extra_inlines = []

    @classmethod
    def extend(
        cls, *, list_filter: list[Any] | tuple[Any, ...] = (), inlines: list[Any] | tuple[Any, ...] = ()
    ) -> None:
        cls.extra_list_filter.extend(f for f in list_filter if f not in cls.extra_list_filter)
        cls.extra_inlines.extend(i for i in inlines if i not in cls.extra_inlines)

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [*super().get_list_filter(request), *self.extra_list_filter]

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        return [*super().get_inlines(request, obj), *self.extra_inlines]
