"""Table actions beside writes: rollback (which writers also run first), compaction, clean."""
