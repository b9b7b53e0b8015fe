"""The commit coordinator: a gRPC service owning each table's timeline, locks, OCC/NBCC ordering and commit events."""
