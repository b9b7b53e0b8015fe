"""Table actions beside writes: compaction, rollback, clean."""
