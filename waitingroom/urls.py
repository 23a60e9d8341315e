from django.urls import path

from waitingroom.api import QueueApi, QueuePassApi

urlpatterns = [
    path("products/<id:product_id>/queue", QueueApi.as_view(), name="product-queue"),
    path("queue/passes/<id:pass_id>", QueuePassApi.as_view(), name="queue-pass"),
]
