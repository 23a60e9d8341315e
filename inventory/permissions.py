"""Ops groups: who may change stock during a sale and who may only look."""

from django.contrib.auth.models import Group, Permission

STOCK_MANAGERS = "Stock managers"
OPS_VIEWERS = "Ops viewers"

_VIEW = [
    ("inventory", "view_product"),
    ("inventory", "view_inventory"),
    ("inventory", "view_stockmovement"),
    ("orders", "view_order"),
    ("orders", "view_orderline"),
    ("orders", "view_reservation"),
    ("payments", "view_paymentattempt"),
    ("payments", "view_processedevent"),
]
_MANAGE = [
    *_VIEW,
    ("inventory", "adjust_stock"),
    ("inventory", "change_product"),
    ("orders", "change_order"),  # the Cancel order action
]


def _permissions(pairs):
    found = []
    for app_label, codename in pairs:
        found.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return found


def ensure_ops_groups():
    """Create or refresh both groups; returns {"stock_managers": Group, "ops_viewers": Group}."""
    managers, _ = Group.objects.get_or_create(name=STOCK_MANAGERS)
    managers.permissions.set(_permissions(_MANAGE))
    viewers, _ = Group.objects.get_or_create(name=OPS_VIEWERS)
    viewers.permissions.set(_permissions(_VIEW))
    return {"stock_managers": managers, "ops_viewers": viewers}
