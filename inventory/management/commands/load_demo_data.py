"""Demo catalogue and demo accounts. Idempotent: existing products, stock and users are left untouched.

DEMO DATA ONLY: the customer token ``test-customer-token`` and the ops password (skincare/demo.py) exist so that a
newcomer can try the API and the admin on a laptop. Never load this into a real shop: with DJANGO_ENV=production the
command refuses, and every start-up refuses a database that has the demo accounts (skincare.E003).
"""

from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from inventory import catalogue
from inventory.models import Product
from skincare import services as skincare_services
from skincare.demo import DEMO_CUSTOMER, DEMO_CUSTOMER_TOKEN, DEMO_OPS_PASSWORD, DEMO_OPS_USER
from skincare.models import ApiToken, api_token_digest
from skincare.selectors import api_token_user

DEMO_PRODUCTS = [
    # (id, sku, name, price, initial stock)
    (101, "SRM-NIA-10", "Niacinamide 10% Serum (flash sale)", Decimal("129000.00"), 100),
    (102, "MST-CER-50", "Ceramide Barrier Moisturizer 50ml", Decimal("89000.00"), 500),
    (103, "SUN-SPF50", "Sunscreen SPF 50 PA++++", Decimal("75000.00"), 500),
    (104, "TNR-AHA-100", "AHA/BHA Exfoliating Toner 100ml", Decimal("99000.00"), 300),
    (105, "CLN-GEL-150", "Gentle Gel Cleanser 150ml", Decimal("59000.00"), 800),
    (106, "SRM-VITC-15", "Vitamin C 15% Serum", Decimal("149000.00"), 200),
    (107, "MSK-CLAY-80", "Kaolin Clay Mask 80g", Decimal("69000.00"), 250),
    (108, "EYE-RET-15", "Retinol Eye Cream 15ml", Decimal("119000.00"), 150),
]


class Command(BaseCommand):
    help = "Load the demo catalogue (product 101 is the flash-sale serum) and demo accounts. Idempotent."

    @transaction.atomic
    def handle(self, *args, **options):
        if settings.PRODUCTION:
            raise CommandError(
                "refusing to load the demo data with DJANGO_ENV=production: its accounts' credentials are published."
            )
        created = 0
        for product_id, sku, name, price, stock in DEMO_PRODUCTS:
            if Product.objects.filter(pk=product_id).exists() or Product.objects.filter(sku=sku).exists():
                continue
            catalogue.product_create(product_id=product_id, sku=sku, name=name, price=price, initial_stock=stock)
            created += 1
        with connection.cursor() as cursor:  # explicit ids were used: move the sequence past them
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence('products', 'id'), GREATEST((SELECT MAX(id) FROM products), 1000))"
            )
        User = get_user_model()
        customer, _ = User.objects.get_or_create(username=DEMO_CUSTOMER)
        if api_token_user(token=DEMO_CUSTOMER_TOKEN) != customer:
            # The demo token is stored as a digest like every token; a revoked, expired or foreign row is replaced.
            ApiToken.objects.filter(digest=api_token_digest(DEMO_CUSTOMER_TOKEN)).delete()
            skincare_services.api_token_issue(user=customer, token=DEMO_CUSTOMER_TOKEN)
        ops, ops_created = User.objects.get_or_create(username=DEMO_OPS_USER, defaults={"is_staff": True})
        if ops_created:
            ops.set_password(DEMO_OPS_PASSWORD)
            ops.save()
            from inventory.permissions import ensure_ops_groups

            ensure_ops_groups()["stock_managers"].user_set.add(ops)
        self.stdout.write(
            f"demo data: {created} products created ({len(DEMO_PRODUCTS) - created} already there); "
            f"customer token '{DEMO_CUSTOMER_TOKEN}', admin '{DEMO_OPS_USER}' / '{DEMO_OPS_PASSWORD}' (demo only)"
        )
