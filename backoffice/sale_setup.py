"""The waiting room's part of ``flash_sale_setup``: the command describes the whole sale, its queue included
(``--queue``, ``--admit-per-second``)."""

from django.conf import settings

from waitingroom import services as queue_services


def sale_queue_reset(*, product_id: int, queued: bool, admit_per_second: int | None) -> str | None:
    """Give the product a fresh queue at ``admit_per_second`` (None: QUEUE_ADMIT_PER_SECOND), the old one's passes
    deleted, or no queue when not ``queued``: one transaction a join cannot interleave with. Returns the line the
    command prints (None without a queue)."""
    if not queued:
        queue_services.queue_remove(product_id=product_id)
        return None
    queue_services.queue_reset(product_id=product_id, admit_per_second=admit_per_second)
    pace = settings.QUEUE_ADMIT_PER_SECOND if admit_per_second is None else admit_per_second
    return (
        f"flash_sale_setup: queue admit_per_second={pace} opens_for_joining={settings.QUEUE_OPENS_BEFORE_SECONDS} s "
        f"before the sale; admission_ttl={settings.ADMISSION_TTL_SECONDS} s"
    )
