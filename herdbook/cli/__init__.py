"""The `herd` command line: the only package that imports typer and rich."""
