"""The vocabulary: events, states, subjects, stream configs, codec and the event store.

Imports nothing else of herdbook.
"""
