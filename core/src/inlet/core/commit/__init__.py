"""Committing an instant: the commit protocol, its result, locks, heartbeats, markers."""
