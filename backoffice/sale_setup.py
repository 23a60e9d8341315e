"""The waiting room's part of ``flash_sale_setup``: an extension point filled by a higher layer.

Orders must not import the waiting room (dependencies point waitingroom → orders), yet ``flash_sale_setup``
describes the whole sale, its queue included (``--queue``, ``--admit-per-second``). ``waitingroom.apps`` registers
the function that gives the product a fresh queue (or none) from its ``AppConfig.ready()``.
"""

from collections.abc import Callable

# (product_id, queued, admit_per_second or None for the default) -> a line describing the queue
QueueConfigurer = Callable[[int, bool, int | None], str | None]

_configurer: QueueConfigurer | None = None


def register_queue_configurer(configurer: QueueConfigurer | None) -> None:
    global _configurer  # one process-wide hook, set once at start-up
    _configurer = configurer


def configure_queue(*, product_id: int, queued: bool, admit_per_second: int | None) -> str | None:
    """Give the product a fresh queue at ``admit_per_second`` (None: QUEUE_ADMIT_PER_SECOND), or no queue when not
    ``queued``; returns the line to print (None without a queue, or when no waiting room is installed)."""
    if _configurer is None:
        return None
    return _configurer(product_id, queued, admit_per_second)
