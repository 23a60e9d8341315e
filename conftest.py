import os
from decimal import Decimal
from itertools import count

import pytest

# Defaults for the processes the tests start (gunicorn, manage.py commands: they inherit this environment). This
# process read its settings before this file (pytest-django loads them first; devtools/testenv.py is what reaches
# them), so here the sold-out memory and the product read's age keep their defaults and the autouse fixture below
# empties the memories; a test that needs another value sets it (the settings fixture).
# Each started process closes its connection at the end of a request, so none stays open when the test database is
# dropped; tests restock and re-buy within milliseconds, so its sold-out memory is off and its product page is read
# afresh (inventory.selectors) unless the test says otherwise.
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
os.environ.setdefault("SOLD_OUT_CACHE_MS", "0")
os.environ.setdefault("PRODUCT_READ_MAX_AGE_SECONDS", "0")

_skus = count(1)
# A product spread over 8 stock buckets (guarded_update): the race modules run every race against it too.
BUCKETED = "bucketed"


@pytest.fixture(autouse=True)
def _fresh_sold_out_memory():
    from inventory import soldout
    from payments import boundary
    from skincare import selectors
    from waitingroom import counters, joins

    soldout.forget_all()
    selectors.forget_all()  # tokens remembered by this process (the demo token exists in many tests)
    counters.queue_counters_forget()  # the queues' counters this process read (a poll with a signed pass)
    joins.JOINS.forget()  # the joins this process answered
    boundary.forget()  # the gateway boundary's breaker and calls in flight (payments.boundary)
    yield
    soldout.forget_all()
    selectors.forget_all()
    counters.queue_counters_forget()
    joins.JOINS.forget()
    boundary.forget()


@pytest.fixture(autouse=True)
def _token_feed_read_once(request, monkeypatch):
    """A process with tokens remembered reads the feed of invalidations once a second (skincare.selectors): in a test
    that would put a feed read wherever the wall clock crosses a second, inside any count of statements. So each test
    reads the feed once, at its first authenticated request, and not again; the feed's own tests (marked
    ``token_feed``) run it with its real interval and their own clock."""
    from skincare import selectors

    if request.node.get_closest_marker("token_feed") is None:
        monkeypatch.setattr(selectors, "FEED_INTERVAL_SECONDS", float("inf"))


@pytest.fixture(autouse=True)
def _joins_written_at_once(request, settings):
    """A join is written in its own request (QUEUE_JOIN_FLUSH_MS = 0), so a test reads its pass at once, inside the
    test's transaction; the batch's own tests (marked ``join_batch``) run the flush thread at its interval."""
    if request.node.get_closest_marker("join_batch") is None:
        settings.QUEUE_JOIN_FLUSH_MS = 0


@pytest.fixture
def inventory_strategy():
    """The strategy ``make_product`` gives new products. Concurrency test modules override this fixture with one
    parametrized over every strategy, so the whole race suite runs against each (docs/strategies.md)."""
    return "guarded_update"


@pytest.fixture
def make_product(db, inventory_strategy):
    from inventory import catalogue, services

    def make(*, stock=10, price="10.00", is_active=True, name=None, strategy=None, max_per_customer=None, buckets=1):
        n = next(_skus)
        strategy = strategy or inventory_strategy
        if strategy == BUCKETED:  # the race suite's extra case: guarded_update over 8 stock buckets
            strategy, buckets = "guarded_update", 8
        product = catalogue.product_create(
            sku=f"TEST-{os.getpid()}-{n}",
            name=name or f"Test product {n}",
            price=Decimal(price),
            initial_stock=stock,
            is_active=is_active,
            inventory_strategy=strategy,
            max_per_customer=max_per_customer,
        )
        if buckets > 1:
            services.stock_buckets_set(product_id=product.pk, buckets=buckets)
            product.refresh_from_db()
        return product

    return make


@pytest.fixture
def make_customer(db):
    from django.contrib.auth import get_user_model

    from skincare import services

    def make(username=None):
        user = get_user_model().objects.create(username=username or f"customer-{next(_skus)}")
        user.api_token = services.api_token_issue(user=user)
        return user

    return make


@pytest.fixture
def customer(make_customer):
    return make_customer()


@pytest.fixture
def api(customer):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    client.customer = customer
    return client


def pytest_configure(config):
    # The flash-sale tests open 100 connections to the live server in the same instant. Django's test server
    # listens with a backlog of 10, which makes the kernel reset the surplus connections; production runs
    # gunicorn with a backlog of 2048 (config/gunicorn.conf.py). Give the test server a production-like queue.
    from django.core.servers.basehttp import WSGIServer

    WSGIServer.request_queue_size = 1024
