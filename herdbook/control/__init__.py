"""The composition root (bootstrap) and the parts only it runs."""
