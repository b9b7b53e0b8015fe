"""The timeline: instants, the active timeline, commit metadata."""
