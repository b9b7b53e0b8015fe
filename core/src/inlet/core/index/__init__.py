"""Indexes that map a record key to its file group: bucket (hash) and simple (stored keys)."""
