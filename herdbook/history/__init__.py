"""The read side of HERD_EVENTS: node history (cause chains), the audit trail and time
travel, each a query over the one log reader (``reader.py``).

Nothing here imports the API or the control plane: the API's routes call these queries,
and the CLI imports only ``times`` (how operators write a time).
"""
