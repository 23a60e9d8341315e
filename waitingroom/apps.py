from django.apps import AppConfig


class WaitingroomConfig(AppConfig):
    name = "waitingroom"
    verbose_name = "Waiting room"

    def ready(self) -> None:
        from orders.sale_setup import register_queue_configurer
        from orders.saleboard import register_queue_source
        from skincare.metrics import register_scrape_collector
        from skincare.retention import register_pruner
        from waitingroom.metrics import QueueCollector
        from waitingroom.selectors import board_queue
        from waitingroom.services import flash_sale_queue, queues_advance

        # The sweeper loop (expire_reservations --loop) runs every registered pruner each interval: that is where
        # admissions advance (docs/queue.md), in a process `make run` and the production layout already start.
        register_pruner("waitingroom_admissions", queues_advance)
        register_queue_configurer(flash_sale_queue)
        register_scrape_collector(QueueCollector())
        register_queue_source(board_queue)  # the sale board's waiting-room panel
