"""Pure deciders and the reactors that feed them to the one decide runner."""
