"""The ``inlet`` command line."""
