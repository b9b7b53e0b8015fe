"""Committing an instant: the commit protocol, its lifecycle, locks, heartbeats, markers."""
