"""Test helpers: set a sale window and a queue's clock from the database clock (never Python's, never a sleep)."""

from django.db import connection

from waitingroom import counters, services


def queue_product(product, *, pace=10, starts_in: float | None = None) -> None:
    """Give ``product`` a queue at ``pace``; with ``starts_in`` its sale opens that many seconds from the database's
    now (negative: it opened that long ago)."""
    if starts_in is not None:
        sale_starts_in(product, starts_in)
    services.queue_set(product_id=product.pk, admit_per_second=pace)


def sale_starts_in(product, seconds: float) -> None:
    """Move the product's sale window; this process's queue counters (read before the move, by a join or a poll) are
    dropped, as QUEUE_COUNTERS_MAX_AGE_SECONDS later (the placements read stay)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE products SET sale_starts_at = now() + make_interval(secs => %s) WHERE id = %s",
            [seconds, product.pk],
        )
    counters.queue_counters_forget(placements=False)


def rewind_queue_clock(product, seconds: float) -> None:
    """As if ``seconds`` more had passed since the queue's last advance (its credit clock moves back): how the pace
    is tested without waiting."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE product_queues SET credited_at = COALESCE(credited_at, now()) - make_interval(secs => %s) "
            "WHERE product_id = %s",
            [seconds, product.pk],
        )


def reset_queue_clock(product) -> None:
    """As if the queue had just advanced: no credit, the credit clock at the database's now."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE product_queues SET credit = 0, credited_at = now() WHERE product_id = %s", [product.pk])


def lapse_admissions(product) -> None:
    """Every outstanding admission of the product lapses (admitted_until moved into the past)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_passes SET admitted_until = now() - interval '1 second' "
            "WHERE product_id = %s AND admitted_at IS NOT NULL AND used_at IS NULL",
            [product.pk],
        )


def admitted_positions(product) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT position FROM queue_passes WHERE product_id = %s AND admitted_at IS NOT NULL ORDER BY position",
            [product.pk],
        )
        return [p for (p,) in cursor.fetchall()]


def admit_now(product) -> services.AdvanceCounts:
    """Advance the queue as if its pace were unlimited: everyone the stock allows is admitted (the pace itself is
    tested elsewhere); the queue's pace is put back afterwards."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT admit_per_second FROM product_queues WHERE product_id = %s", [product.pk])
        (pace,) = cursor.fetchone()
        cursor.execute(
            "UPDATE product_queues SET admit_per_second = 1000000, credited_at = now() - interval '1 second' "
            "WHERE product_id = %s",
            [product.pk],
        )
    advanced = services.queue_advance(product_id=product.pk)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE product_queues SET admit_per_second = %s, credit = 0 WHERE product_id = %s", [pace, product.pk]
        )
    return advanced
