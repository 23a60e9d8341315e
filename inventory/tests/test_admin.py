"""The ops admin: pages load, stock changes only through the service-backed forms, permissions hold."""

import threading
from decimal import Decimal

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.db import connection, connections, transaction
from django.test import Client, RequestFactory
from django.urls import reverse

from checkout.testing import place_order
from devtools.testing import assert_invariants
from inventory.admin.product_form import product_version
from inventory.models import Inventory, Product, StockBucket, StockMovement
from inventory.permissions import ensure_ops_groups
from orders.models import Order, Reservation
from payments import services as payment_services
from payments.models import PaymentAttempt, ProcessedEvent

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


def make_staff(username, group=None, **extra):
    user = get_user_model().objects.create_user(username=username, password=PASSWORD, is_staff=True, **extra)
    if group:
        ensure_ops_groups()[group].user_set.add(user)
    return user


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def manager():
    return make_staff("stock-manager", "stock_managers")


@pytest.fixture
def viewer():
    return make_staff("ops-viewer", "ops_viewers")


@pytest.fixture
def manager_client(manager):
    return client_for(manager)


@pytest.fixture
def viewer_client(viewer):
    return client_for(viewer)


@pytest.fixture
def superuser_client():
    return client_for(make_staff("root", is_superuser=True))


def messages_of(response):
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def stock(product):
    inv = Inventory.objects.get(product=product)
    return inv.available_stock, inv.reserved_stock, inv.version


def adjust_url(product):
    return reverse("admin:inventory_inventory_adjust", args=[product.pk])


def set_counted_url(product):
    return reverse("admin:inventory_inventory_set_counted", args=[product.pk])


def change_url(model, pk):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[pk])


def changelist_url(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def pay(order, amount=None, event_id=None):
    return payment_services.payment_event_apply(
        event_id=event_id or f"evt-admin-{order.pk}",
        event_type=payment_services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total if amount is None else amount,
        currency=order.currency,
    )


@pytest.fixture
def shop(make_product, make_customer):
    """Serum: 6 available, 3 reserved (pending order: 2, amount-mismatch order, still pending: 1), 1 paid.
    Toner: 2 available, nothing reserved, 1 paid."""
    serum, toner = make_product(stock=10, name="Serum"), make_product(stock=3, name="Toner")
    pending = place_order(customer=make_customer(), items=[(serum.pk, 2)])
    paid = place_order(customer=make_customer(), items=[(serum.pk, 1), (toner.pk, 1)])
    pay(paid)
    mismatch = place_order(customer=make_customer(), items=[(serum.pk, 1)])
    pay(mismatch, amount=Decimal("0.01"))
    return {"serum": serum, "toner": toner, "pending": pending, "paid": paid, "mismatch": mismatch}


# -- pages ---------------------------------------------------------------------------------------------------


def test_every_ops_page_loads_for_a_stock_manager(manager_client, shop):
    serum, pending, paid = shop["serum"], shop["pending"], shop["paid"]
    attempt = PaymentAttempt.objects.filter(order=paid).first()
    event = ProcessedEvent.objects.first()
    urls = [
        reverse("admin:index"),
        changelist_url(Product),
        changelist_url(Product) + "?q=Serum",
        change_url(Product, serum.pk),
        changelist_url(Inventory),
        changelist_url(Inventory) + f"?q={serum.sku}",
        changelist_url(Inventory) + "?available_lte=5",
        changelist_url(Inventory) + "?has_active_reservations=yes",
        change_url(Inventory, serum.pk),
        adjust_url(serum),
        set_counted_url(serum),
        changelist_url(StockMovement),
        changelist_url(StockMovement) + f"?product__id__exact={serum.pk}",
        changelist_url(StockMovement) + f"?order_id__exact={paid.pk}",
        changelist_url(StockMovement) + "?reason__exact=consume",
        changelist_url(Order),
        changelist_url(Order) + "?status__exact=paid",
        change_url(Order, pending.pk),
        change_url(Order, paid.pk),
        changelist_url(Reservation),
        change_url(Reservation, Reservation.objects.filter(order=pending).get().pk),
        changelist_url(PaymentAttempt),
        changelist_url(PaymentAttempt) + "?status__exact=amount_mismatch",
        changelist_url(PaymentAttempt) + "?status__exact=refund_required",
        changelist_url(PaymentAttempt) + "?needs_ops=yes",
        change_url(PaymentAttempt, attempt.pk),
        changelist_url(ProcessedEvent),
        change_url(ProcessedEvent, event.pk),
    ]
    statuses = {url: manager_client.get(url).status_code for url in urls}
    assert statuses == dict.fromkeys(urls, 200)


def test_order_page_shows_lines_reservations_payment_attempts_and_ledger(manager_client, shop):
    paid = shop["paid"]
    response = manager_client.get(change_url(Order, paid.pk))

    formset_models = {formset.opts.model for formset in response.context["inline_admin_formsets"]}
    assert formset_models == {Order.lines.rel.related_model, Reservation, PaymentAttempt}
    html = response.content.decode()
    assert html.count('class="ledger-row"') == StockMovement.objects.filter(order_id=paid.pk).count() == 4
    assert "Consumed by payment" in html
    # Money and status are displayed, not editable.
    for name in ("status", "total", "payment_expires_at", "cancel_reason", "customer"):
        assert f'name="{name}"' not in html


def test_inventory_list_filters(manager_client, shop):
    serum, toner = shop["serum"], shop["toner"]

    def listed(query):
        response = manager_client.get(changelist_url(Inventory) + query)
        assert response.status_code == 200
        return {inv.pk for inv in response.context["cl"].result_list}

    assert listed("") == {serum.pk, toner.pk}
    assert listed("?available_lte=5") == {toner.pk}
    assert listed("?available_lte=6") == {serum.pk, toner.pk}
    assert listed("?available_lte=0") == set()
    assert listed("?has_active_reservations=yes") == {serum.pk}
    assert listed("?has_active_reservations=no") == {toner.pk}
    assert listed(f"?q={toner.sku}") == {toner.pk}
    assert listed("?q=serum") == {serum.pk}


def test_payment_attempt_list_filters_for_ops(manager_client, shop):
    response = manager_client.get(changelist_url(PaymentAttempt) + "?needs_ops=yes")
    assert {a.order_id for a in response.context["cl"].result_list} == {shop["mismatch"].pk}
    response = manager_client.get(changelist_url(PaymentAttempt) + "?status__exact=amount_mismatch")
    assert {a.order_id for a in response.context["cl"].result_list} == {shop["mismatch"].pk}


def test_stock_counters_are_never_an_editable_field(superuser_client, manager_client, shop):
    serum = shop["serum"]
    for client in (superuser_client, manager_client):
        inventory_page = client.get(change_url(Inventory, serum.pk)).content.decode()
        product_page = client.get(change_url(Product, serum.pk)).content.decode()
        for html in (inventory_page, product_page):
            assert 'name="available_stock"' not in html
            assert 'name="inventory-0-available_stock"' not in html
            assert 'name="reserved_stock"' not in html
        assert client.post(change_url(Inventory, serum.pk), {"available_stock": 999}).status_code == 403
    assert stock(serum)[:2] == (6, 3)


def test_product_edit_cannot_smuggle_a_stock_change(manager_client, shop):
    serum = shop["serum"]
    before = stock(serum)
    response = manager_client.post(
        change_url(Product, serum.pk),
        {
            "sku": serum.sku,
            "name": "Serum, renamed",
            "price": "12.50",
            "loaded_version": product_version(serum.pk),  # the page as loaded (the stale-page check)
            "is_active": "on",
            "inventory_strategy": "guarded_update",  # the form's select always submits a value
            "stock_buckets": "1",
            "inventory-TOTAL_FORMS": "1",
            "inventory-INITIAL_FORMS": "1",
            "inventory-MIN_NUM_FORMS": "0",
            "inventory-MAX_NUM_FORMS": "1",
            "inventory-0-product": str(serum.pk),
            "inventory-0-available_stock": "999",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    serum.refresh_from_db()
    assert (serum.name, serum.price) == ("Serum, renamed", Decimal("12.50"))
    assert stock(serum) == before


def test_adding_a_product_in_the_admin_creates_its_inventory(superuser_client):
    response = superuser_client.post(
        reverse("admin:inventory_product_add"),
        {
            "sku": "ADMIN-NEW",
            "name": "New cleanser",
            "price": "9.99",
            "is_active": "on",
            "inventory_strategy": "guarded_update",  # the form's select always submits a value
            "stock_buckets": "1",
            "inventory-TOTAL_FORMS": "0",
            "inventory-INITIAL_FORMS": "0",
            "inventory-MIN_NUM_FORMS": "0",
            "inventory-MAX_NUM_FORMS": "1",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    product = Product.objects.get(sku="ADMIN-NEW")
    assert stock(product) == (0, 0, 1)
    assert_invariants()


# -- adjust and set counted ----------------------------------------------------------------------------------


def test_change_page_and_list_link_to_the_stock_forms_for_a_manager_only(manager_client, viewer_client, shop):
    serum = shop["serum"]
    for url in (change_url(Inventory, serum.pk), changelist_url(Inventory)):
        manager_html = manager_client.get(url).content.decode()
        viewer_response = viewer_client.get(url)
        assert viewer_response.status_code == 200
        assert adjust_url(serum) in manager_html
        assert set_counted_url(serum) in manager_html
        assert adjust_url(serum) not in viewer_response.content.decode()
        assert set_counted_url(serum) not in viewer_response.content.decode()


def test_adjust_via_admin_writes_a_ledger_row_with_actor_and_note(manager_client, manager, shop):
    serum = shop["serum"]
    available, reserved, version = stock(serum)
    marker = StockMovement.objects.order_by("-id").first().pk

    response = manager_client.post(adjust_url(serum), {"delta": "5", "note": "carton found in back room"})

    assert response.status_code == 302
    assert response["Location"] == change_url(Inventory, serum.pk)
    assert stock(serum) == (available + 5, reserved, version + 1)
    rows = list(StockMovement.objects.filter(pk__gt=marker))
    assert [(r.reason, r.product_id, r.available_delta, r.reserved_delta, r.actor_id, r.note) for r in rows] == [
        ("adjustment", serum.pk, 5, 0, manager.pk, "carton found in back room")
    ]
    assert messages_of(response) == [("success", f"Adjusted {serum.sku} by +5: 11 available, 3 reserved.")]
    page = manager_client.get(response["Location"]).content.decode()
    assert f'data-ledger-id="{rows[0].pk}"' in page
    assert "carton found in back room" in page
    assert_invariants()


def test_adjust_below_zero_shows_a_message_and_writes_nothing(manager_client, shop):
    serum = shop["serum"]  # 6 available, 3 reserved
    before, ledger_rows = stock(serum), StockMovement.objects.count()

    response = manager_client.post(adjust_url(serum), {"delta": "-7", "note": "write off"})

    assert response.status_code == 409
    assert messages_of(response) == [
        (
            "error",
            "Refused: 6 units are available, so a change of -7 would push available stock below zero. "
            "Nothing was changed.",
        )
    ]
    assert "below zero" in response.content.decode()
    assert stock(serum) == before
    assert StockMovement.objects.count() == ledger_rows
    assert_invariants()


@pytest.mark.django_db(transaction=True)  # the holder's connection must see the product
@pytest.mark.parametrize("form", ["adjust", "set_counted"])
def test_a_stock_form_while_checkouts_hold_the_row_says_busy_and_writes_nothing(manager_client, make_product, form):
    """The ops writes run through the transaction runner: a lock timeout is ``ServiceBusy``, which the form shows as
    a message with 503 and Retry-After (not a 500), keeping what was typed."""
    product = make_product(stock=4)
    before, ledger_rows = stock(product), StockMovement.objects.count()
    held, release = threading.Event(), threading.Event()

    def hold_row():
        try:
            with transaction.atomic():
                list(StockBucket.objects.select_for_update(no_key=True).filter(product=product))
                held.set()
                assert release.wait(timeout=60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_row)
    holder.start()
    try:
        assert held.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        if form == "adjust":
            response = manager_client.post(adjust_url(product), {"delta": "5", "note": "carton found"})
        else:
            data = {"counted": "9", "version": str(before[2]), "note": "carton found"}
            response = manager_client.post(set_counted_url(product), data)
    finally:
        release.set()
        holder.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert messages_of(response) == [
        ("error", "The stock is busy right now (checkouts hold it); nothing was changed. Try again in a moment.")
    ]
    assert "carton found" in response.content.decode()  # the form keeps what was typed
    assert stock(product) == before
    assert StockMovement.objects.count() == ledger_rows


@pytest.mark.parametrize(
    ("data", "field"),
    [({"delta": "0", "note": "x"}, "delta"), ({"delta": "3", "note": "  "}, "note"), ({"note": "x"}, "delta")],
    ids=["zero", "blank-reason", "no-delta"],
)
def test_adjust_form_needs_a_non_zero_delta_and_a_reason(manager_client, shop, data, field):
    serum = shop["serum"]
    before, ledger_rows = stock(serum), StockMovement.objects.count()

    response = manager_client.post(adjust_url(serum), data)

    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert stock(serum) == before
    assert StockMovement.objects.count() == ledger_rows


def test_set_counted_via_admin_writes_a_count_row(manager_client, manager, shop):
    serum = shop["serum"]
    page = manager_client.get(set_counted_url(serum))
    version = page.context["form"].initial["version"]
    assert f'name="version" value="{version}"' in page.content.decode()

    response = manager_client.post(set_counted_url(serum), {"counted": "4", "note": "shelf count", "version": version})

    assert response.status_code == 302
    assert stock(serum) == (4, 3, version + 1)
    row = StockMovement.objects.order_by("-id").first()
    assert (row.reason, row.available_delta, row.reserved_delta, row.actor_id, row.note) == (
        "count",
        -2,
        0,
        manager.pk,
        "shelf count",
    )
    assert messages_of(response) == [
        ("success", f"Counted stock of {serum.sku} saved: 4 available (-2), 3 reserved."),
    ]
    assert_invariants()


def test_set_counted_with_an_old_version_is_refused(manager_client, shop, make_customer):
    """Single-threaded version of test_stale_form.py: the row moved on between GET and POST."""
    serum = shop["serum"]
    version = manager_client.get(set_counted_url(serum)).context["form"].initial["version"]
    place_order(customer=make_customer(), items=[(serum.pk, 1)])
    before, ledger_rows = stock(serum), StockMovement.objects.count()

    response = manager_client.post(set_counted_url(serum), {"counted": "15", "note": "count", "version": version})

    assert response.status_code == 409
    [(level, text)] = messages_of(response)
    assert level == "error"
    assert text.startswith("Stock changed while you were editing")
    assert stock(serum) == before
    assert StockMovement.objects.count() == ledger_rows
    # The page offers a fresh form, at the current version, to count again.
    assert response.context["form"].initial["version"] == before[2]
    assert_invariants()


# -- permissions ---------------------------------------------------------------------------------------------


def test_view_only_user_gets_403_on_the_stock_forms(viewer_client, shop):
    serum = shop["serum"]
    before, ledger_rows = stock(serum), StockMovement.objects.count()

    assert viewer_client.get(adjust_url(serum)).status_code == 403
    assert viewer_client.post(adjust_url(serum), {"delta": "5", "note": "x"}).status_code == 403
    assert viewer_client.get(set_counted_url(serum)).status_code == 403
    assert viewer_client.post(set_counted_url(serum), {"counted": "1", "note": "x", "version": 1}).status_code == 403

    assert stock(serum) == before
    assert StockMovement.objects.count() == ledger_rows
    # ...but sees everything.
    assert viewer_client.get(changelist_url(Inventory)).status_code == 200
    assert viewer_client.get(change_url(Order, shop["pending"].pk)).status_code == 200
    assert viewer_client.get(changelist_url(StockMovement)).status_code == 200


@pytest.mark.parametrize("who", ["anonymous", "non-staff customer"])
def test_non_staff_are_sent_to_the_login_page(customer, shop, who):
    client = Client()
    if who != "anonymous":
        customer.set_password(PASSWORD)
        customer.save()
        client.force_login(customer)
    serum = shop["serum"]
    before = stock(serum)

    for url in (reverse("admin:index"), changelist_url(Inventory), adjust_url(serum), set_counted_url(serum)):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    response = client.post(adjust_url(serum), {"delta": "5", "note": "x"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert stock(serum) == before


def test_staff_without_any_group_sees_no_models(shop):
    client = client_for(make_staff("plain-staff"))
    assert client.get(reverse("admin:index")).context["app_list"] == []
    assert client.get(changelist_url(Inventory)).status_code == 403
    assert client.get(adjust_url(shop["serum"])).status_code == 403


# -- cancel order action -------------------------------------------------------------------------------------


def test_cancel_action_cancels_pending_orders_and_reports_the_others(manager_client, shop, make_customer):
    serum, toner = shop["serum"], shop["toner"]
    pending, paid = shop["pending"], shop["paid"]
    second = place_order(customer=make_customer(), items=[(toner.pk, 1)])
    already = place_order(customer=make_customer(), items=[(serum.pk, 1)])
    first = manager_client.post(
        changelist_url(Order), {"action": "cancel_orders", "_selected_action": [already.pk]}, follow=True
    )
    assert [str(m) for m in first.context["messages"]] == [f"Cancelled 1 order(s), stock returned: #{already.pk}."]
    assert Order.objects.get(pk=already.pk).status == Order.Status.CANCELLED

    response = manager_client.post(
        changelist_url(Order),
        {"action": "cancel_orders", "_selected_action": [pending.pk, paid.pk, second.pk, already.pk]},
    )

    assert response.status_code == 302
    assert messages_of(response) == [
        ("success", f"Cancelled 2 order(s), stock returned: #{pending.pk}, #{second.pk}."),
        ("warning", f"Not cancelled, no longer pending payment: #{paid.pk} (paid), #{already.pk} (cancelled)."),
    ]
    statuses = dict(Order.objects.values_list("pk", "status"))
    assert statuses[pending.pk] == statuses[second.pk] == statuses[already.pk] == Order.Status.CANCELLED
    assert statuses[paid.pk] == Order.Status.PAID
    assert set(
        Order.objects.filter(pk__in=[pending.pk, second.pk, already.pk]).values_list("cancel_reason", flat=True)
    ) == {Order.CancelReason.OPS_CANCELLED}
    # Serum: 10 - 1 paid - 1 still held by the (pending) amount-mismatch order; toner: 3 - 1 paid.
    assert stock(serum)[:2] == (8, 1)
    assert stock(toner)[:2] == (2, 0)
    assert Reservation.objects.filter(order=shop["mismatch"], status="active").count() == 1
    assert_invariants()


def test_cancel_action_is_not_offered_to_a_viewer(viewer_client, shop):
    pending = shop["pending"]
    response = viewer_client.get(changelist_url(Order))
    assert response.status_code == 200
    assert response.context["action_form"] is None or "cancel_orders" not in dict(
        response.context["action_form"].fields["action"].choices
    )

    viewer_client.post(changelist_url(Order), {"action": "cancel_orders", "_selected_action": [pending.pk]})

    assert Order.objects.get(pk=pending.pk).status == Order.Status.PENDING_PAYMENT


def test_orders_are_never_saved_from_the_change_form(manager_client, shop):
    pending = shop["pending"]
    response = manager_client.post(change_url(Order, pending.pk), {"status": "paid", "total": "0.00"})
    assert response.status_code == 403
    pending.refresh_from_db()
    assert (pending.status, pending.total) == (Order.Status.PENDING_PAYMENT, Decimal("20.00"))


# -- read-only admins ----------------------------------------------------------------------------------------

READ_ONLY = [StockMovement, Reservation, PaymentAttempt, ProcessedEvent]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_read_only_admins_have_no_add_change_or_delete(superuser_client, shop, model):
    obj = model.objects.first()
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="root")

    assert (
        model_admin.has_add_permission(request),
        model_admin.has_change_permission(request, obj),
        model_admin.has_delete_permission(request, obj),
    ) == (False, False, False)
    assert model_admin.has_view_permission(request, obj)
    assert model_admin.get_actions(request) == {}  # not even "delete selected"
    opts = model._meta
    assert superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
    assert (
        superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_delete", args=[obj.pk])).status_code
        == 403
    )
    assert superuser_client.post(change_url(model, obj.pk), {}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


@pytest.mark.parametrize("model", [Inventory, Order, Product], ids=lambda m: m.__name__)
def test_stock_and_orders_cannot_be_added_or_deleted_in_the_admin(superuser_client, shop, model):
    obj = model.objects.first()
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="root")
    opts = model._meta

    assert model_admin.has_delete_permission(request, obj) is False
    assert "delete_selected" not in model_admin.get_actions(request)
    assert (
        superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_delete", args=[obj.pk])).status_code
        == 403
    )
    if model is not Product:  # products are added through product_create (see the test above)
        assert model_admin.has_add_permission(request) is False
        assert superuser_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403


def test_migrate_creates_both_ops_groups_with_their_permissions(db):
    from django.contrib.auth.models import Group

    managers = Group.objects.get(name="Stock managers")
    viewers = Group.objects.get(name="Ops viewers")
    assert managers.permissions.filter(codename="adjust_stock").exists()
    assert not viewers.permissions.filter(codename="adjust_stock").exists()
    assert viewers.permissions.filter(codename="view_inventory").exists()
