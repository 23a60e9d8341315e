from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "payments"
    verbose_name = "Payments"

    def ready(self) -> None:
        from orders.payment_links import register_payment_url_builder
        from orders.sale_report import register_payments_source
        from payments import checks  # noqa: F401 - registers the system checks
        from payments.idempotency import idempotency_keys_prune
        from payments.reporting import payments_for_report
        from payments.sandbox import payment_url
        from payments.services import processed_events_prune
        from skincare.retention import register_pruner

        register_payment_url_builder(payment_url)
        register_payments_source(payments_for_report)
        register_pruner("processed_events", processed_events_prune)
        register_pruner("idempotency_keys", idempotency_keys_prune)
