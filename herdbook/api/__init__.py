"""The request/reply API of the control plane (``herd.api.v1.>``).

``messages`` is the wire: the request and reply Structs the server and the CLI share.
The rest is the server: ``server`` wires the routes, one module per noun answers them,
``deciders`` holds their business rules as pure functions. Nothing here is imported by
``events``, ``projector`` or ``reactors``; the CLI imports only the wire
(``messages``, and ``history_messages`` for the read side).
"""
