"""The lock order's helpers: the advisory-lock keys and the guard that refuses a lock outside a transaction.

The order itself, its named steps and why it cannot deadlock are in docs/locking.md (#the-lock-order); code that
takes a lock names its step there ("step 3") and does not retell the order.

Advisory keys are one bigint: the key space in the top bits, the id below (ids up to 2**47), after pretix's
``KEY_SPACES``. Every advisory lock is transaction-scoped (``pg_advisory_xact_lock``): released by COMMIT or
ROLLBACK, so it works behind a transaction-mode pooler.
"""

from collections.abc import Iterable

from django.db import connection

ADVISORY_KEY_SPACES = {
    "inventory_product": 1,
    "customer_checkout": 2,
    "product_queue": 3,
    "admin_login": 4,
    "sweeper_lease": 5,
}
_ID_BITS = 47


def advisory_key(space: str, ident: int) -> int:
    """The bigint advisory-lock key of ``ident`` in ``space`` (one of :data:`ADVISORY_KEY_SPACES`)."""
    if not 0 < ident < 2**_ID_BITS:
        raise ValueError(f"advisory lock id out of range: {ident}")
    return (ADVISORY_KEY_SPACES[space] << _ID_BITS) | ident


def require_transaction() -> None:
    """Refuse to take locks outside a transaction: in autocommit they would be released at once."""
    if not connection.in_atomic_block:
        raise RuntimeError("locks must be taken inside transaction.atomic()")


def advisory_xact_lock(*, space: str, idents: Iterable[int]) -> None:
    """``pg_advisory_xact_lock`` for each id in ascending order (waiting), one statement per key."""
    require_transaction()
    with connection.cursor() as cursor:
        for ident in sorted(set(idents)):
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(space, ident)])
