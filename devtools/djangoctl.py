"""Bulk helpers for the load tests and the benchmark that need Django (one process, many calls).

    python -m devtools.djangoctl tokens COUNT PREFIX OUT.json     # issue_token for COUNT customers
    python -m devtools.djangoctl seed-spread FIRST COUNT STOCK      # COUNT products FIRST.. through product_create
    python -m devtools.djangoctl seed-product ID STOCK              # one product (e.g. a sold-out SKU, STOCK 0)
    python -m devtools.djangoctl queue-passes ID STOCK PREFIX TOKENS.json OUT.txt  # a waiting pass per customer
    python -m devtools.djangoctl flash-sale-check --product 101 --since-order-id N --stock S [--client-created C]

Every stock change goes through ``inventory.services`` so the ledger stays consistent.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from devtools.processes import setup_django_quietly


def tokens(count: int, prefix: str, out: str) -> None:
    """What ``manage.py issue_token`` does for each of COUNT customers (created if needed with an unusable password,
    earlier tokens revoked, one fresh token each), in one transaction with the users created in bulk: 50,000
    customers in seconds rather than minutes."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import transaction
    from django.db.models.functions import Now

    from skincare import services
    from skincare.models import ApiToken

    user_model = get_user_model()
    names = [f"{prefix}-{i:05d}" for i in range(count)]
    # The names go to PostgreSQL in chunks: one statement takes at most 65,535 parameters.
    chunks = [names[i : i + 10_000] for i in range(0, count, 10_000)]
    with transaction.atomic():
        known = {
            u
            for chunk in chunks
            for u in user_model.objects.filter(username__in=chunk).values_list("username", flat=True)
        }
        fresh = [user_model(username=name, password=make_password(None)) for name in names if name not in known]
        user_model.objects.bulk_create(fresh, batch_size=2000)
        users: dict[str, Any] = {}
        for chunk in chunks:
            users.update(user_model.objects.filter(username__in=chunk).in_bulk(field_name="username"))
        for chunk in chunks:
            ApiToken.objects.filter(user__username__in=chunk, revoked_at__isnull=True).update(revoked_at=Now())
        issued = [services.api_token_issue(user=users[name]) for name in names]
    with open(out, "w") as fh:
        json.dump(issued, fh)
    print(f"{len(issued)} tokens written to {out}")


def seed_product(product_id: int, stock: int, name: str | None = None) -> bool:
    from inventory import catalogue
    from inventory.models import Product

    if Product.objects.filter(pk=product_id).exists():
        return False
    catalogue.product_create(
        product_id=product_id,
        sku=f"BENCH-{product_id}",
        name=name or f"Bench product {product_id}",
        price=Decimal("50000.00") + product_id,
        initial_stock=stock,
    )
    return True


def seed_spread(first: int, count: int, stock: int) -> None:
    created = sum(seed_product(pid, stock) for pid in range(first, first + count))
    print(f"{created} products created ({count - created} already there), ids {first}..{first + count - 1}")


def queue_passes(product_id: int, stock: int, prefix: str, tokens_json: str, out: str) -> None:
    """Product ``product_id`` (created with ``stock`` if needed) sold through a fresh queue that is paused, and a
    placed pass for each customer of TOKENS.json (``tokens``' file: the i-th token is PREFIX-<i>'s), written to OUT
    one a line: ``<customer token> <pass id> <signed pass>``. Paused, because a paused queue admits nobody whatever
    runs its advance (docs/queue.md): every pass stays waiting, with its position, for as long as the queue exists,
    and every poll of one is answered 200 ``waiting``, with or without its signed pass."""
    from django.contrib.auth import get_user_model

    from waitingroom import passtoken, selectors, services
    from waitingroom.joins import JOINS

    with open(tokens_json) as fh:
        tokens = json.load(fh)
    names = [f"{prefix}-{i:05d}" for i in range(len(tokens))]
    customers = get_user_model().objects.in_bulk(names, field_name="username")
    seed_product(product_id, stock)
    services.queue_reset(product_id=product_id)
    services.queue_pause(product_id=product_id, paused=True)
    for name in names:
        services.queue_join(customer=customers[name], product_id=product_id)
    JOINS.flush()  # the passes this process answered, written now rather than by its flush thread
    services.queue_advance(product_id=product_id)  # places every pass; paused: admits none
    lines = []
    for token, name in zip(tokens, names, strict=True):
        customer_id = customers[name].pk
        queue_pass = selectors.pass_get(customer_id=customer_id, product_id=product_id)
        if queue_pass is None or queue_pass.state != selectors.WAITING or queue_pass.position is None:
            raise SystemExit(f"{name}'s pass of product {product_id} is not waiting in place: {queue_pass}")
        signed = passtoken.SignedPass(
            pass_id=queue_pass.pass_id,
            product_id=product_id,
            customer_id=customer_id,
            position=queue_pass.position,
            queue_created_us=queue_pass.queue_created_us,
        )
        lines.append(f"{token} {queue_pass.pass_id} {passtoken.pass_sign(signed)}\n")
    with open(out, "w") as fh:
        fh.writelines(lines)
    print(f"{len(lines)} waiting passes of product {product_id} written to {out}")


def flash_sale_check(product: int, since_order_id: int, stock: int, client_created: int | None) -> bool:
    """Units held (reserved or sold) for ``product`` by orders opened since the setup must not exceed the stock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT COUNT(DISTINCT o.id), COALESCE(SUM(l.qty), 0)
            FROM orders o JOIN order_lines l ON l.order_id = o.id
            WHERE l.product_id = %s AND o.id > %s AND o.status <> 'cancelled'
            """,
            [product, since_order_id],
        )
        orders, units = cursor.fetchone()
        # With a sale window: no order before its start, every line at the sale price (docs/sale-windows.md).
        cursor.execute(
            """
            SELECT p.sale_starts_at IS NOT NULL, p.sale_price,
                   (SELECT COUNT(*) FROM orders o JOIN order_lines l ON l.order_id = o.id
                    WHERE l.product_id = p.id AND o.id > %s AND o.created_at < p.sale_starts_at),
                   (SELECT array_agg(DISTINCT l.unit_price::text) FROM orders o JOIN order_lines l ON l.order_id = o.id
                    WHERE l.product_id = p.id AND o.id > %s)
            FROM products p WHERE p.id = %s
            """,
            [since_order_id, since_order_id, product],
        )
        windowed, sale_price, before_start, unit_prices = cursor.fetchone()
    ok = units <= stock and (client_created is None or client_created <= stock)
    print(
        f"{'ok  ' if ok else 'FAIL'} orders created for product {product} since the setup: {orders} orders, "
        f"{units} units; 201 responses seen by the clients: {client_created}; flash-sale stock {stock}"
    )
    if windowed:
        prices_ok = sale_price is None or set(unit_prices or []) <= {str(sale_price)}
        window_ok = before_start == 0 and prices_ok
        ok = ok and window_ok
        print(
            f"{'ok  ' if window_ok else 'FAIL'} sale window: {before_start} orders created before sale_starts_at; "
            f"unit prices {sorted(unit_prices or [])} (sale price {sale_price})"
        )
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.djangoctl")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tokens")
    p.add_argument("count", type=int)
    p.add_argument("prefix")
    p.add_argument("out")
    p = sub.add_parser("seed-spread")
    p.add_argument("first", type=int)
    p.add_argument("count", type=int)
    p.add_argument("stock", type=int)
    p = sub.add_parser("seed-product")
    p.add_argument("id", type=int)
    p.add_argument("stock", type=int)
    p.add_argument("--name")
    p = sub.add_parser("queue-passes")
    p.add_argument("id", type=int)
    p.add_argument("stock", type=int)
    p.add_argument("prefix")
    p.add_argument("tokens")
    p.add_argument("out")
    p = sub.add_parser("flash-sale-check")
    p.add_argument("--product", type=int, default=101)
    p.add_argument("--since-order-id", type=int, required=True)
    p.add_argument("--stock", type=int, required=True)
    p.add_argument("--client-created", type=int)
    args = parser.parse_args(argv)
    setup_django_quietly()
    if args.cmd == "tokens":
        tokens(args.count, args.prefix, args.out)
    elif args.cmd == "seed-spread":
        seed_spread(args.first, args.count, args.stock)
    elif args.cmd == "seed-product":
        print("created" if seed_product(args.id, args.stock, args.name) else "already there")
    elif args.cmd == "queue-passes":
        queue_passes(args.id, args.stock, args.prefix, args.tokens, args.out)
    else:
        return 0 if flash_sale_check(args.product, args.since_order_id, args.stock, args.client_created) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
