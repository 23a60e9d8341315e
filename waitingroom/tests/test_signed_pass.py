"""The signed pass (docs/queue.md#polling): a forged or another customer's pass is refused, the answer computed from
the signed pass and the process's queue counters agrees with the database's, and a waiting pass's poll costs no
statement while the counters are fresh."""

import pytest
from django.core import signing
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from skincare.api import JSONRenderer
from waitingroom import counters, passtoken, selectors, services
from waitingroom.models import QueuePass
from waitingroom.testing import admit_now, queue_product, reset_queue_clock, rewind_queue_clock, sale_starts_in

pytestmark = pytest.mark.django_db


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def join(client, product):
    body = client.post(f"/v1/products/{product.pk}/queue").json()
    return body["poll_url"], body["pass_token"]


def poll(client, url, token):
    return client.get(url, HTTP_QUEUE_PASS=token)


def test_a_forged_pass_is_refused(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    url, token = join(api, product)
    payload = signing.Signer(salt=passtoken.SALT).unsign_object(token)
    signature = token.rsplit(":", 1)[1]
    moved_up = signing.Signer(salt=passtoken.SALT).sign_object({**payload, "n": 1}).rsplit(":", 1)[0]
    wrong_key = signing.Signer(key="not the secret", salt=passtoken.SALT).sign_object({**payload, "n": 1})

    for forged in (f"{moved_up}:{signature}", wrong_key, token[:-2], "garbage", ""):
        refused = poll(api, url, forged)
        assert (refused.status_code, refused.json()["code"]) == (403, "queue_pass_invalid"), forged
    assert poll(api, url, token).status_code == 200  # control: the genuine pass


def test_another_customers_pass_is_refused(api, make_customer, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    url, token = join(api, product)
    other = client_for(make_customer())
    other_url, other_token = join(other, product)

    copied = poll(other, url, token)  # the pass copied to another customer's client
    assert (copied.status_code, copied.json()["code"]) == (403, "queue_pass_invalid")
    swapped = poll(other, url, other_token)  # a genuine pass of one's own, sent for another's pass id
    assert (swapped.status_code, swapped.json()["code"]) == (403, "queue_pass_invalid")
    assert poll(other, other_url, other_token).status_code == 200  # control: one's own pass
    assert poll(api, url, token).status_code == 200


def test_the_signed_pass_answers_what_the_database_answers(make_customer, make_product):
    product = make_product(stock=30)
    queue_product(product, pace=5, starts_in=60)
    clients = [client_for(make_customer()) for _ in range(40)]
    passes = [join(client, product) for client in clients]
    sale_starts_in(product, -1)
    reset_queue_clock(product)
    services.queue_advance(product_id=product.pk)  # everyone placed, nobody admitted yet
    rewind_queue_clock(product, 2)
    admitted = services.queue_advance(product_id=product.pk).admitted  # the first few admitted
    counters.queue_counters_forget()

    placed = []
    for client, (url, token) in zip(clients, passes, strict=True):
        first = poll(client, url, token)  # signed before the opening: no position yet, the answer signs it
        assert first.status_code == 200
        placed.append(first.json()["pass_token"])
    checked = 0
    for client, customer_token, (url, _) in zip(clients, placed, passes, strict=True):
        body = poll(client, url, customer_token).json()
        expected = selectors.pass_get(customer_id=_customer_id(customer_token), pass_id=_pass_id(customer_token))
        assert expected is not None
        database = expected.to_json()
        assert {k: body[k] for k in database} == database
        checked += 1
    assert checked == 40
    states = sorted(selectors.pass_get(customer_id=_customer_id(t), pass_id=_pass_id(t)).state for t in placed)
    assert 0 < states.count("admitted") == admitted < 40  # both paths (the database's, the counters') compared
    assert states.count("waiting") == 40 - admitted


def _customer_id(token):
    return signing.Signer(salt=passtoken.SALT).unsign_object(token)["c"]


def _pass_id(token):
    return signing.Signer(salt=passtoken.SALT).unsign_object(token)["i"]


def placed_pass(api, product):
    """A pass placed behind 20 others and not admitted, with its signed copy carrying its position."""
    queue_product(product, pace=5, starts_in=60)
    url, token = join(api, product)
    sale_starts_in(product, -1)
    reset_queue_clock(product)
    services.queue_advance(product_id=product.pk)
    with connection.cursor() as cursor:  # 20 placed ahead of it: it waits whatever its draw
        cursor.execute("UPDATE queue_passes SET position = position + 20 WHERE product_id = %s", [product.pk])
    return url, poll(api, url, token).json()["pass_token"]


def test_a_waiting_pass_polls_without_a_statement_while_the_counters_are_fresh(api, make_product):
    url, token = placed_pass(api, make_product(stock=5))
    poll(api, url, token)  # this process reads the queues' counters (and remembers the customer's token)

    with CaptureQueriesContext(connection) as queries:
        answers = [poll(api, url, token) for _ in range(50)]
    assert [a.json()["state"] for a in answers] == ["waiting"] * 50
    assert answers[0].content == JSONRenderer().render(answers[0].json())  # the bytes the API's renderer writes
    assert {a.json()["position"] for a in answers} == {21} and {a.json()["ahead"] for a in answers} == {20}
    assert len(queries) == 0, [q["sql"] for q in queries]


def test_control_stale_counters_and_polls_without_the_signed_pass_read_the_database(api, make_product):
    url, token = placed_pass(api, make_product(stock=5))
    poll(api, url, token)

    counters.queue_counters_forget(placements=False)  # as when QUEUE_COUNTERS_MAX_AGE_SECONDS has passed
    with CaptureQueriesContext(connection) as stale:
        poll(api, url, token)
        poll(api, url, token)
    assert len(stale) == 1  # one read of every queue's counters for the process, not one per poll
    with CaptureQueriesContext(connection) as cookie:
        assert api.get(url).json()["position"] == 21  # the cookie the join set is a signed pass too
    assert len(cookie) == 0
    api.cookies.clear()
    with CaptureQueriesContext(connection) as unsigned:
        assert api.get(url).json()["position"] == 21
    assert len(unsigned) == 1  # without a signed pass: the pass read from the database


def test_admission_and_its_use_stay_exact_in_the_database(api, make_product):
    product = make_product(stock=5)
    url, token = placed_pass(api, product)
    poll(api, url, token)
    admit_now(product)  # everyone up to the stock: the pass (position 21) is not among them
    assert poll(api, url, token).json()["state"] == "waiting"
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_passes SET position = position - 20 WHERE product_id = %s", [product.pk])
    admit_now(product)
    counters.queue_counters_forget()

    answer = poll(api, url, token)
    assert answer.content == JSONRenderer().render(answer.json())  # the bytes the API's renderer writes
    admitted = answer.json()  # at or before the serving counter: read from the database
    assert admitted["state"] == "admitted" and admitted["admitted_until"] is not None
    assert admitted["position"] == 1 and admitted["pass_token"] != token  # re-signed with its new position


def test_before_the_opening_a_pass_reveals_nothing_of_its_draw(make_customer, make_product, settings):
    product = make_product(stock=5)
    queue_product(product, starts_in=600)
    answers = []
    for _ in range(20):
        client = client_for(make_customer())
        url, token = join(client, product)
        answers.append(poll(client, url, token).json())
    draws = dict(QueuePass.objects.filter(product=product).values_list("id", "draw"))
    assert len(set(draws.values())) == 20  # the draws differ
    # every answer alike whatever the draw: the position unknown, the next poll at QUEUE_POLL_MAX_SECONDS
    assert {(a["position"], a["ahead"], a["poll_after"]) for a in answers} == {
        (None, None, settings.QUEUE_POLL_MAX_SECONDS)
    }
    assert "draw" not in passtoken.SignedPass.__dataclass_fields__  # nor does the signed pass carry it


def pre_opening_passes(product, make_customer, n):
    """``n`` customers join before the opening; their clients and the passes (poll URL, token with no position)
    the join signed. Each join authenticated its customer's token, which the process remembers."""
    queue_product(product, pace=1, starts_in=60)  # an advance within a second of the opening admits nobody
    clients = [client_for(make_customer()) for _ in range(n)]
    return clients, [join(client, product) for client in clients]


def the_opening(product):
    """The sale opens and the real advance places everyone in one step (nobody admitted yet)."""
    sale_starts_in(product, -1)
    reset_queue_clock(product)
    assert services.queue_advance(product_id=product.pk).admitted == 0


def positions_of(product):
    return dict(QueuePass.objects.filter(product=product).values_list("id", "position"))


@pytest.fixture
def counters_kept(settings):
    """Tokens and counters outlive the test (nothing expires halfway through a few hundred polls)."""
    settings.API_TOKEN_CACHE_SECONDS = 3600
    settings.QUEUE_COUNTERS_MAX_AGE_SECONDS = 3600


def first_polls_after_the_opening(make_customer, make_product, n):
    product = make_product(stock=n)
    clients, passes = pre_opening_passes(product, make_customer, n)
    the_opening(product)
    counters.queue_counters_forget()  # a process that has read nothing since the opening
    with CaptureQueriesContext(connection) as queries:
        answers = [poll(client, url, token).json() for client, (url, token) in zip(clients, passes, strict=True)]
    return product, answers, len(queries)


@pytest.mark.django_db(transaction=True)
def test_the_first_polls_after_the_opening_read_the_placements_once_per_process(
    counters_kept, make_customer, make_product
):
    product, answers, statements = first_polls_after_the_opening(make_customer, make_product, 300)

    assert statements <= 2  # the counters, then every placement at once: not one statement per pass
    database = positions_of(product)
    assert sorted(database.values()) == list(range(1, 301))
    assert {a["pass_id"]: a["position"] for a in answers} == database
    assert {a["state"] for a in answers} == {"waiting"}
    assert all(a["ahead"] == a["position"] - 1 for a in answers)
    assert all(passtoken_position(a["pass_token"]) == a["position"] for a in answers)  # re-signed with it


@pytest.mark.django_db(transaction=True)
def test_control_without_the_placements_every_first_poll_reads_its_pass(
    counters_kept, make_customer, make_product, monkeypatch
):
    monkeypatch.setattr(counters, "PLACEMENTS_HELD", 0)
    product, answers, statements = first_polls_after_the_opening(make_customer, make_product, 300)

    assert statements == 1 + 300  # the counters, then one read per pass
    assert {a["pass_id"]: a["position"] for a in answers} == positions_of(product)


def passtoken_position(token):
    return signing.Signer(salt=passtoken.SALT).unsign_object(token)["n"]


def test_a_pass_placed_after_the_process_read_the_placements_gets_its_exact_position(
    counters_kept, make_customer, make_product
):
    product = make_product(stock=10)
    clients, passes = pre_opening_passes(product, make_customer, 3)
    the_opening(product)
    assert poll(clients[0], *passes[0]).json()["position"] is not None  # the process reads the placements
    late = client_for(make_customer())
    url, token = join(late, product)  # joins after the opening: placed at the next advance, behind the three
    services.queue_advance(product_id=product.pk)

    with CaptureQueriesContext(connection) as queries:
        answer = poll(late, url, token).json()
    assert len(queries) == 1  # not in this process's placements: its pass read from the database
    assert answer["position"] == positions_of(product)[answer["pass_id"]] == 4
    assert passtoken_position(answer["pass_token"]) == 4
    copied = poll(late, *passes[1])  # another customer's pass, whose position this process holds
    assert (copied.status_code, copied.json()["code"]) == (403, "queue_pass_invalid")


def same_answer(signed, unsigned, status):
    """The answers of a signed poll (answered from the pass) and of the same request without it (the pass read from
    the database): the same status, body bytes and headers."""
    assert signed.status_code == unsigned.status_code == status, (signed.content, unsigned.content)
    assert signed.content == unsigned.content
    for header in ("Content-Type", "WWW-Authenticate", "Retry-After", "Allow"):
        assert signed.get(header) == unsigned.get(header), header


def test_a_signed_polls_errors_are_the_apis_errors(api, make_product, monkeypatch):
    """Each error of a poll with a signed pass is the answer the same request gets without the signed pass: no
    credentials, a malformed or unknown token (401), a pass that is gone (404), an outage (503)."""
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    url, token = join(api, product)
    for authorization in (None, "Bearer not-a-token", "Bearer a b"):
        client = APIClient()
        if authorization:
            client.credentials(HTTP_AUTHORIZATION=authorization)
        same_answer(poll(client, url, token), client.get(url), 401)

    api.cookies.clear()  # the join's cookie is a signed pass too: the request without one gets none
    assert poll(api, url, token).status_code == api.get(url).status_code == 200  # control: both paths answer
    outage = OperationalError("connection refused")
    monkeypatch.setattr(selectors, "pass_poll", lambda **_: (_ for _ in ()).throw(outage))
    monkeypatch.setattr(selectors, "pass_get", lambda **_: (_ for _ in ()).throw(outage))
    same_answer(poll(api, url, token), api.get(url), 503)
    monkeypatch.undo()

    services.queue_remove(product_id=product.pk)  # the queue and its passes gone
    counters.queue_counters_forget()
    same_answer(poll(api, url, token), api.get(url), 404)


@pytest.mark.django_db(transaction=True)  # committed: the reset is a transaction of its own, as in production
def test_a_pass_of_the_products_earlier_queue_is_gone_once_the_queue_is_reset(api, make_product):
    product = make_product(stock=5)
    url, token = placed_pass(api, product)
    assert poll(api, url, token).json()["state"] == "waiting"  # the counters of the first queue, read
    services.queue_reset(product_id=product.pk, admit_per_second=10)  # a new sale: the passes go with the old queue
    counters.queue_counters_forget()  # as QUEUE_COUNTERS_MAX_AGE_SECONDS after the reset

    gone = poll(api, url, token)
    assert (gone.status_code, gone.json()["code"]) == (410, "queue_pass_outdated")
    api.cookies.clear()
    assert api.get(url).json()["code"] == "queue_not_found"  # control: the same poll without the pass (a 404)
    new_url, new_token = join(api, product)
    assert new_url != url
    assert poll(api, new_url, new_token).json()["state"] == "waiting"  # the new queue's pass
    assert poll(api, url, token).status_code == 410  # and the old one stays gone


@pytest.mark.django_db(transaction=True)
def test_a_pass_newer_than_the_counters_a_process_holds_is_answered_by_the_database(api, make_product):
    product = make_product(stock=5)
    url, token = placed_pass(api, product)
    poll(api, url, token)  # this process holds the first queue's counters
    held = counters._counters, counters._read_monotonic
    services.queue_reset(product_id=product.pk, admit_per_second=10)
    counters.queue_counters_forget(placements=False)
    new_url, new_token = join(api, product)  # the new queue's pass, answered by a process that read the new queue
    counters._counters, counters._read_monotonic = held  # polled in this one, before it reads the counters again

    with CaptureQueriesContext(connection) as queries:
        answer = poll(api, new_url, new_token)
    assert (answer.status_code, answer.json()["state"]) == (200, "waiting")
    assert len(queries) == 1  # the pass read from the database: never answered from an earlier queue's counters
    services.queue_remove(product_id=product.pk)
    assert poll(api, new_url, new_token).status_code == 404  # the database's answer, exact: no queue, no pass


def test_a_pass_signed_without_its_queue_is_polled_through_the_database(api, make_product):
    url, token = placed_pass(api, make_product(stock=5))
    poll(api, url, token)
    payload = signing.Signer(salt=passtoken.SALT).unsign_object(token)
    del payload["q"]  # as passes were signed before they named their queue
    unnamed = signing.Signer(salt=passtoken.SALT).sign_object(payload)

    with CaptureQueriesContext(connection) as queries:
        answer = poll(api, url, unnamed)
    assert (answer.status_code, answer.json()["position"]) == (200, 21)
    assert len(queries) == 1  # control beside the fresh-counters test: no counters answer a pass of no known queue
