from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "payments"
    verbose_name = "Payments"

    def ready(self) -> None:
        from orders.payment_links import register_payment_url_builder
        from payments.sandbox import payment_url

        register_payment_url_builder(payment_url)
