"""The health room: what a GPU's report means, as pure code over the event vocabulary.

- ``policy``: the CEL health policy (rules over an event or a check, with history and
  holds) and its verdict; ``policy_fields``: the fields a rule may name, so a rule that
  names another is refused at load; ``navarch``: Navarch's policy format read as ours.
- ``actions``: the recommended action per verdict and event kind (the XID table).
- ``fault_history``: each node's recent faults, for a rule's ``history.*``.
- ``fault_hold``: how long a counter-like fault keeps a GPU DEGRADED.

It imports ``events`` (and the small top-level helpers ``durations`` and ``clock``) only;
the classifier that applies it is a reactor (``reactors/classifier.py``, its decider
``reactors/health.py``), and so is ``reactors/policy_trial.py`` (`herd health test-policy`).
"""
