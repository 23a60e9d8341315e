"""Strict request-body validation helpers: JSON integers must be integers (not booleans, floats or strings)."""

from skincare.errors import InvalidInput


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def require_object(data):
    if not isinstance(data, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return data


def checkout_items(data, *, max_items, max_qty):
    """``{"items": [{"product_id": int > 0, "qty": 1..max_qty}, ...]}`` → [(product_id, qty), ...]."""
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
    parsed, errors = [], {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            errors[f"items[{index}]"] = ["Must be an object with product_id and qty."]
            continue
        product_id, qty = item.get("product_id"), item.get("qty")
        problems = []
        if not is_int(product_id) or product_id <= 0 or product_id > 2**63 - 1:
            problems.append("product_id must be a positive integer.")
        if not is_int(qty) or qty <= 0:
            problems.append("qty must be a positive integer.")
        elif qty > max_qty:
            problems.append(f"qty must be at most {max_qty}.")
        if problems:
            errors[f"items[{index}]"] = problems
        else:
            parsed.append((product_id, qty))
    if errors:
        raise InvalidInput("Some items are invalid.", fields=errors)
    return parsed
