"""The HTTP side of the control plane: the HTTP API over the same route handlers as the
NATS API (``server.py``), its OpenAPI document (``openapi.py``), the event stream as
Server-Sent Events (``sse.py``), bearer-token auth (``auth.py``) and the web console
(``console/``). Imported only by the composition root (``control/``) and `herd up`."""
