"""The nats-server herdbook runs itself: the embedded server (``server``), which
processes are a store's own (``ownership``), a local cluster (``cluster``), its users and
their permissions (``users``) and the watch on its disk (``storage_watch``)."""
