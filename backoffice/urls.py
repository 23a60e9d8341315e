"""The back office's routes, included at the root by the project's URLconf: ``/metrics`` (Prometheus) with the
waiting room's scrape-time queue counts, and the sale board's page and JSON under the admin (staff only: the
admin's login, then :data:`backoffice.views.PERMISSION`)."""

from django.contrib import admin
from django.urls import path

from backoffice import views
from skincare import metrics
from waitingroom.metrics import QueueCollector

urlpatterns = [
    path("metrics", metrics.metrics_view, {"scrape_collectors": [QueueCollector()]}, name="metrics"),
    path("admin/orders/order/sale-board/", admin.site.admin_view(views.board_view), name="sale-board"),
    path(
        "admin/orders/order/sale-board/data.json", admin.site.admin_view(views.board_data_view), name="sale-board-data"
    ),
]
