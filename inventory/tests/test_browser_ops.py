"""A stock manager in a real (headless Debian Chromium) browser against the live server: adjust stock with a
reason, then try to save a count while a customer checks out, and get refused.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``apt-get install chromium chromium-driver``); the
test fails, never skips, without them. With ``SKINCARE_SCREENSHOT_DIR`` set, it saves ``admin-adjust.png``
there (the screenshot in docs/runbooks/stock.md: ``SKINCARE_SCREENSHOT_DIR=docs/img pytest -m browser``).
"""

import os
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from checkout.testing import place_order
from devtools.testing import assert_invariants, run_concurrently
from inventory import catalogue
from inventory.models import Inventory, StockMovement
from inventory.permissions import ensure_ops_groups
from orders.models import Reservation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
]
WAIT_SECONDS = 20
USERNAME, PASSWORD = "ops-browser", "ops-browser-password"


@pytest.fixture
def launch_browser(tmp_path):
    """Returns a function that starts headless Chromium. Called from the test body, so that missing binaries
    make the test FAIL (a fixture error would be reported as an error, and a skip would hide it)."""
    drivers = []

    def launch():
        missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) and os.access(p, os.X_OK))]
        if missing:
            pytest.fail(
                f"The browser test needs Debian's Chromium and its driver; missing: {', '.join(missing)}. "
                "Install them with: apt-get install chromium chromium-driver",
                pytrace=False,
            )
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in CHROMIUM_ARGS:
            options.add_argument(arg)
        options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        drivers.append(driver)
        driver.set_page_load_timeout(WAIT_SECONDS)
        return driver

    yield launch
    for driver in drivers:
        driver.quit()


@pytest.fixture
def stock_manager():
    user = get_user_model().objects.create_user(username=USERNAME, password=PASSWORD, is_staff=True)
    ensure_ops_groups()["stock_managers"].user_set.add(user)
    return user


def text_of(driver, element_id):
    return driver.find_element(By.ID, element_id).text.strip()


def submit(driver, form_id):
    driver.find_element(By.CSS_SELECTOR, f"#{form_id} input[type=submit]").click()


def message_with(level, text):
    """Wait condition: an admin message of ``level`` (success, error...) containing ``text``."""
    return EC.text_to_be_present_in_element((By.CSS_SELECTOR, f"ul.messagelist li.{level}"), text)


def checkout_on_another_connection(customer, product_id, qty):
    [outcome] = run_concurrently(1, lambda i: place_order(customer=customer, items=[(product_id, qty)]))
    assert outcome.error is None, outcome.error
    return outcome.value


def test_stock_manager_adjusts_then_a_stale_count_is_refused(launch_browser, live_server, stock_manager, make_customer):
    browser = launch_browser()
    product = catalogue.product_create(
        sku="SRM-NIA-10", name="Niacinamide 10% Serum (flash sale)", price=Decimal("129000.00"), initial_stock=100
    )
    checkout_on_another_connection(make_customer(), product.pk, 3)  # the sale is on: 97 available, 3 reserved
    wait = WebDriverWait(browser, WAIT_SECONDS)
    adjust_path = reverse("admin:inventory_inventory_adjust", args=[product.pk])

    # Log in; the admin sends us on to the Adjust page.
    browser.get(f"{live_server.url}{reverse('admin:login')}?next={adjust_path}")
    browser.find_element(By.NAME, "username").send_keys(USERNAME)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "#login-form input[type=submit]").click()
    wait.until(EC.presence_of_element_located((By.ID, "adjust-stock-form")))
    assert (text_of(browser, "available-stock"), text_of(browser, "reserved-stock")) == ("97", "3")

    # Adjust +5 with a reason.
    browser.find_element(By.NAME, "delta").send_keys("5")
    browser.find_element(By.NAME, "note").send_keys("Carton of 5 found in the back room")
    screenshot_dir = os.environ.get("SKINCARE_SCREENSHOT_DIR")
    if screenshot_dir:
        Path(screenshot_dir).mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(Path(screenshot_dir) / "admin-adjust.png"))
    submit(browser, "adjust-stock-form")

    wait.until(message_with("success", "Adjusted SRM-NIA-10 by +5: 102 available, 3 reserved."))
    adjustment = StockMovement.objects.filter(product=product, reason=StockMovement.Reason.ADJUSTMENT).get()
    assert (adjustment.available_delta, adjustment.actor_id, adjustment.note) == (
        5,
        stock_manager.pk,
        "Carton of 5 found in the back room",
    )
    # The new ledger row is on the inventory page, newest first...
    newest = browser.find_element(By.CSS_SELECTOR, "table.ledger-rows tbody tr.ledger-row")
    assert newest.get_attribute("data-ledger-id") == str(adjustment.pk)
    assert "Manual adjustment" in newest.text
    assert "+5" in newest.text
    assert USERNAME in newest.text
    assert "Carton of 5 found in the back room" in newest.text
    # ...and in the ledger itself.
    browser.find_element(By.LINK_TEXT, "All ledger rows of this product").click()
    wait.until(EC.presence_of_element_located((By.ID, "result_list")))
    assert "Carton of 5 found in the back room" in browser.find_element(By.ID, "result_list").text

    # Set counted stock: open the form, and while it is open a customer checks out on another connection.
    browser.back()
    wait.until(EC.element_to_be_clickable((By.ID, "set-counted-link"))).click()
    wait.until(EC.presence_of_element_located((By.ID, "set-counted-form")))
    loaded_version = int(browser.find_element(By.NAME, "version").get_attribute("value"))
    assert loaded_version == Inventory.objects.get(product=product).version
    order = checkout_on_another_connection(make_customer(), product.pk, 2)  # now 100 available, 5 reserved
    ledger_rows = StockMovement.objects.count()

    browser.find_element(By.NAME, "counted").send_keys("110")
    browser.find_element(By.NAME, "note").send_keys("Shelf count after delivery")
    submit(browser, "set-counted-form")

    wait.until(message_with("error", "Stock changed while you were editing"))
    # Nothing was written, the reservation is intact, and the page shows the current figures to count against.
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (100, 5)
    assert StockMovement.objects.count() == ledger_rows
    assert not StockMovement.objects.filter(reason=StockMovement.Reason.COUNT).exists()
    assert Reservation.objects.get(order=order).status == Reservation.Status.ACTIVE
    assert (text_of(browser, "available-stock"), text_of(browser, "reserved-stock")) == ("100", "5")
    assert int(browser.find_element(By.NAME, "version").get_attribute("value")) == inventory.version
    assert_invariants()
