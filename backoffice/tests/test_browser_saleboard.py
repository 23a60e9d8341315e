"""The sale board as ops staff see it: headless Debian Chromium opens the board while customers check out over
HTTP against the live server, and the numbers and the charts change without a reload.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (fails, never skips, without them; see
inventory/tests/test_browser_ops.py). With ``SKINCARE_SCREENSHOT_DIR`` set it saves ``sale-board.png`` there (the
screenshot in docs/runbooks/sale.md: ``SKINCARE_SCREENSHOT_DIR=docs/img pytest -m browser``).
"""

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.urls import reverse
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from backoffice import opsmetrics
from devtools.testing import assert_invariants
from inventory.permissions import ensure_ops_groups
from inventory.tests.test_browser_ops import WAIT_SECONDS, launch_browser  # noqa: F401 - the fixture
from orders.models import Order
from payments import services as payment_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

USERNAME, PASSWORD = "ops-board", "ops-board-password"


def checkout(base, token, product_id):
    request = urllib.request.Request(
        f"{base}/v1/checkout",
        data=json.dumps({"items": [{"product_id": product_id, "qty": 1}]}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def field(card, name):
    return card.find_element(By.CSS_SELECTOR, f'[data-field="{name}"] b').text.strip()


def refreshes(browser):
    return int(browser.find_element(By.ID, "board-status").get_attribute("data-refreshes") or 0)


def test_the_board_follows_a_sale(launch_browser, live_server, make_product, make_customer):  # noqa: F811
    browser = launch_browser()
    browser.set_window_size(1280, 1250)
    user = get_user_model().objects.create_user(username=USERNAME, password=PASSWORD, is_staff=True)
    ensure_ops_groups()["ops_viewers"].user_set.add(user)
    product = make_product(stock=8, price="129000.00", name="Niacinamide 10% Serum (flash sale)")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE products SET sale_starts_at = now() - interval '20 seconds', "
            "sale_ends_at = now() + interval '15 minutes', sale_price = 99000 WHERE id = %s",
            [product.pk],
        )
    wait = WebDriverWait(browser, WAIT_SECONDS)
    board_path = reverse("sale-board")
    browser.get(f"{live_server.url}{reverse('admin:login')}?next={board_path}")
    browser.find_element(By.NAME, "username").send_keys(USERNAME)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "#login-form input[type=submit]").click()
    wait.until(lambda b: b.find_elements(By.ID, f"product-{product.pk}"))
    card = browser.find_element(By.ID, f"product-{product.pk}")
    assert card.find_element(By.CSS_SELECTOR, "[data-window-state]").text == "open"
    assert "closes in" in card.find_element(By.CSS_SELECTOR, ".countdown").text
    assert (field(card, "available"), field(card, "reserved"), field(card, "sold")) == ("8", "0", "0")
    created_line = card.find_element(By.CSS_SELECTOR, 'polyline[data-series="orders created / s"]')
    flat = created_line.get_attribute("points")
    assert len({point.split(",")[1] for point in flat.split()}) == 1  # nothing sold yet: a flat line
    browser.execute_script("window.boardNotReloaded = true")  # a reload would drop it

    # The live server counts in this process's registry, which earlier tests of the session counted in too.
    conflicts_before = opsmetrics.checkout_snapshot()["outcomes"].get("stock_conflict", 0)

    # Three waves of buyers, each seen by a refresh: 8 units, 11 buyers → 8 orders, 3 refused (stock_conflict).
    customers = [make_customer() for _ in range(11)]
    statuses, orders = [], []
    for wave in (customers[:3], customers[3:7], customers[7:]):
        seen = refreshes(browser)
        for customer in wave:
            status, body = checkout(live_server.url, customer.api_token, product.pk)
            statuses.append(status if status == 201 else body["code"])
            if status == 201:
                orders.append(body["order_id"])
        wait.until(lambda b, seen=seen: refreshes(b) >= seen + 2)
    assert statuses.count(201) == 8 and statuses.count("stock_conflict") == 3, statuses
    for order_id in orders[:3]:  # three of them pay
        order = Order.objects.get(pk=order_id)
        outcome = payment_services.payment_event_apply(
            event_id=f"evt-board-{order_id}",
            event_type="payment.succeeded",
            order_id=order_id,
            amount=order.total,
            currency=settings.SHOP_CURRENCY,
        )
        assert outcome == "paid"

    wait.until(lambda b: field(b.find_element(By.ID, f"product-{product.pk}"), "sold") == "3")
    card = browser.find_element(By.ID, f"product-{product.pk}")
    assert (field(card, "available"), field(card, "reserved"), field(card, "sold")) == ("0", "5", "3")
    assert field(card, "created-5min") == "8"
    assert int(field(card, "peak")) >= 3
    assert "sold out" not in card.text  # 5 units are still held by unpaid orders and may come back
    assert "Next back to stock: in" in card.find_element(By.CSS_SELECTOR, ".expiries").text
    assert (
        card.find_element(By.CSS_SELECTOR, 'polyline[data-series="orders created / s"]').get_attribute("points") != flat
    )
    assert (
        "Waiting room: none for this product"
        in card.find_element(By.CSS_SELECTOR, '[data-section="waiting-room"]').text
    )
    # The overview: the refusals by code, counted and drawn; p50/p99 from the latency histogram.
    refused = browser.find_element(By.CSS_SELECTOR, '#outcome-totals tr[data-outcome="stock_conflict"]')
    cells = [td.text for td in refused.find_elements(By.TAG_NAME, "td")]
    assert cells == ["stock_conflict", str(conflicts_before + 3), "3"]  # since start, last minute
    conflict_line = browser.find_element(By.CSS_SELECTOR, '#outcome-chart polyline[data-series="stock_conflict"]')
    assert len({point.split(",")[1] for point in conflict_line.get_attribute("points").split()}) > 1
    assert browser.find_element(By.CSS_SELECTOR, "#p99 b").text.isdigit()
    # All of it without a reload.
    assert browser.execute_script("return window.boardNotReloaded === true")
    assert "NOT UPDATING" not in browser.find_element(By.ID, "board-status").text

    screenshot_dir = os.environ.get("SKINCARE_SCREENSHOT_DIR")
    if screenshot_dir:
        Path(screenshot_dir).mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(Path(screenshot_dir) / "sale-board.png"))
    assert_invariants()
