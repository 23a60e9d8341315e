"""After a restore to a moment the copy's sequences stand where they stood at the target: the ids issued after it
(orders customers were told about, transactions the gateway knows) would be issued again. ``sequences_advance``
moves every id sequence past them."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from checkout.testing import place_order
from payments.models import PaymentAttempt
from skincare.services import SEQUENCE_RESTORE_GAP


def restore_sequences_to(values):
    """What a restore to a moment does to the sequences: they go back to where they stood at the target."""
    with connection.cursor() as cursor:
        for name, value in values.items():
            cursor.execute("SELECT setval(%s::regclass, %s)", [name, value])


def last_values():
    with connection.cursor() as cursor:
        cursor.execute("SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = current_schema()")
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_after_a_restore_no_order_or_attempt_id_is_issued_twice(make_product, make_customer):
    product = make_product(stock=10)
    at_target = place_order(customer=make_customer(), items=[(product.pk, 1)])
    target = {"orders_id_seq": at_target.pk, "payment_attempts_id_seq": PaymentAttempt.objects.get().pk}
    lost = place_order(customer=make_customer(), items=[(product.pk, 1)])  # after the target: the copy lacks it
    lost_attempt = PaymentAttempt.objects.get(order=lost).pk

    # Control: a copy that takes orders as restored issues the lost order's id again.
    restore_sequences_to(target)
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('orders_id_seq')")
        assert cursor.fetchone()[0] == lost.pk
    restore_sequences_to(target)

    out = StringIO()
    call_command("sequences_advance", stdout=out)

    assert f"orders_id_seq: {at_target.pk} -> {at_target.pk + SEQUENCE_RESTORE_GAP}" in out.getvalue()
    moved = last_values()
    assert set(moved) >= {"orders_id_seq", "payment_attempts_id_seq", "inventory_reservations_id_seq"}
    fresh = place_order(customer=make_customer(), items=[(product.pk, 1)])
    assert fresh.pk == at_target.pk + SEQUENCE_RESTORE_GAP + 1 > lost.pk
    assert PaymentAttempt.objects.get(order=fresh).pk > lost_attempt


@pytest.mark.django_db
@pytest.mark.parametrize("gap", ["0", "-5"])
def test_a_gap_that_moves_nothing_is_refused(gap):
    before = last_values()
    with pytest.raises(CommandError, match="positive"):
        call_command("sequences_advance", "--gap", gap, stdout=StringIO())
    assert last_values() == before
