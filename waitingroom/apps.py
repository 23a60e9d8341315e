from django.apps import AppConfig


class WaitingroomConfig(AppConfig):
    name = "waitingroom"
    verbose_name = "Waiting room"

    def ready(self) -> None:
        from skincare.retention import register_pruner
        from waitingroom.services import queues_advance

        # The sweeper loop (expire_reservations --loop) runs every registered pruner each interval: that is where
        # admissions advance (docs/queue.md), in a process `make run` and the production layout already start.
        register_pruner("waitingroom_admissions", queues_advance)
