"""The nats-server herdbook runs itself: the embedded server (``server``), a local
cluster (``cluster``), its users and their permissions (``users``) and the watch on its
disk (``storage_watch``)."""
