from django.urls import path

from payments import sandbox

app_name = "payments"

urlpatterns = [
    path("sandbox/<int:order_id>", sandbox.sandbox_page, name="sandbox"),
]
