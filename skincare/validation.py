"""Strict request-body validation helpers: JSON integers must be integers (not booleans, floats or strings).

Checkout and the webhook use these instead of DRF serializers: the same refusals for a fraction of the CPU per
request (the hot paths parse a small, fixed shape).
"""

from collections.abc import Iterable
from typing import Any, TypeGuard, cast

from skincare.errors import InvalidInput

# The limits below are what the validation enforces and what the OpenAPI document states (the schemas modules build
# their fields from these constants; skincare/tests/test_openapi_limits.py compares the document with them).
BIGINT_MAX = 2**63 - 1
# An Idempotency-Key header: 1 to 255 printable ASCII characters (U+0020 to U+007E).
IDEMPOTENCY_KEY_MAX_LENGTH = 255
IDEMPOTENCY_KEY_PATTERN = rf"^[ -~]{{1,{IDEMPOTENCY_KEY_MAX_LENGTH}}}$"


def is_idempotency_key(value: str) -> bool:
    return 1 <= len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH and all(" " <= char <= "~" for char in value)


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_positive_bigint(value: Any) -> TypeGuard[int]:
    """A JSON integer that fits a PostgreSQL ``bigint`` id column (1 … 2**63 - 1)."""
    return is_int(value) and 0 < value <= BIGINT_MAX


def require_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return data


def checkout_items(data: Any, *, max_items: int) -> list[tuple[int, int]]:
    """``{"items": [{"product_id": int > 0, "qty": int > 0}, ...]}`` → [(product_id, qty), ...].

    Shape and types only. The per-product unit limit applies to the merged quantities, so it is checked once,
    in :func:`merge_quantities`, for API and service callers alike.
    """
    require_object(data)
    items = data.get("items")
    if items is None:
        raise InvalidInput("`items` is required.", fields={"items": ["This field is required."]})
    if not isinstance(items, list) or not items:
        raise InvalidInput("`items` must be a non-empty list.", fields={"items": ["Must be a non-empty list."]})
    if len(items) > max_items:
        raise InvalidInput(
            f"At most {max_items} lines per checkout.", fields={"items": [f"At most {max_items} lines."]}
        )
    parsed: list[tuple[int, int]] = []
    errors: dict[str, list[str]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            errors[f"items[{index}]"] = ["Must be an object with product_id and qty."]
            continue
        product_id, qty = item.get("product_id"), item.get("qty")
        problems = []
        if not is_positive_bigint(product_id):
            problems.append("product_id must be a positive integer.")
        if not is_int(qty) or qty <= 0:
            problems.append("qty must be a positive integer.")
        if problems:
            errors[f"items[{index}]"] = problems
        else:
            parsed.append((cast(int, product_id), cast(int, qty)))
    if errors:
        raise InvalidInput("Some items are invalid.", fields=errors)
    return parsed


RATE_UNITS = {"second": 1, "s": 1, "minute": 60, "m": 60, "hour": 3600, "h": 3600, "day": 86400, "d": 86400}


def merge_quantities(items: Iterable[tuple[int, int]], *, max_qty: int) -> dict[int, int]:
    """``[(product_id, qty), ...]`` → ``{product_id: total qty}``: a product listed twice is one line, and one order
    holds at most ``max_qty`` units of a product (400 otherwise). A checkout's items are merged once, here."""
    quantities: dict[int, int] = {}
    for product_id, qty in items:
        quantities[product_id] = quantities.get(product_id, 0) + qty
    too_many = {pid: qty for pid, qty in quantities.items() if qty > max_qty}
    if too_many:
        raise InvalidInput(
            f"At most {max_qty} units of one product per order.",
            fields={"items": [f"product {pid}: {qty} units" for pid, qty in sorted(too_many.items())]},
        )
    return quantities


def parse_rate(spec: str) -> tuple[int, int] | None:
    """``"20/minute"`` → (20, 60): hits per fixed window of that many seconds. Empty → None (no limit).
    Raises ValueError on anything else (a system check reports it at start-up)."""
    spec = (spec or "").strip()
    if not spec:
        return None
    count, sep, unit = spec.partition("/")
    if not sep or not count.strip().isdigit() or unit.strip().lower() not in RATE_UNITS or int(count) < 1:
        raise ValueError(f"rate {spec!r} is not like '20/minute' (units: second, minute, hour, day)")
    return int(count), RATE_UNITS[unit.strip().lower()]


class DatabaseIdConverter:
    """A path segment that names a row by its id (``<id:product_id>``, registered in config/urls.py): digits, 1 to
    BIGINT_MAX. A larger number names no row, so the URL does not match (404) instead of reaching PostgreSQL as a
    value its ``bigint`` cannot hold."""

    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 0 < number <= BIGINT_MAX:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)
