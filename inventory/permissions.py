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
    ("payments", "view_unmatchedpayment"),
]
_MANAGE = [
    *_VIEW,
    ("inventory", "adjust_stock"),
    ("inventory", "change_product"),
    ("orders", "change_order"),  # the Cancel order action
    ("payments", "change_unmatchedpayment"),  # the Mark resolved action
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


def ops_groups_post_migrate(sender, using="default", **kwargs):
    """Keep both groups in step with the code after every ``migrate``. post_migrate fires once per app, and the
    permissions of later apps do not exist yet at the earlier calls; those calls leave the groups alone."""
    needed = {(app_label, codename) for app_label, codename in _MANAGE}
    existing = set(
        Permission.objects.using(using)
        .filter(content_type__app_label__in={app for app, _ in needed}, codename__in={c for _, c in needed})
        .values_list("content_type__app_label", "codename")
    )
    if needed <= existing:
        ensure_ops_groups()
