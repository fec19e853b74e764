"""The one compiled part, optional: ``herdbook.events._frames`` cuts runs of JetStream
deliveries out of a read buffer in C (backlog_reader). Without a C compiler the package
installs without it and the same function runs in Python (a rebuild ~15 % slower)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("herdbook.events._frames", ["herdbook/events/_frames.c"],
                             optional=True)])
