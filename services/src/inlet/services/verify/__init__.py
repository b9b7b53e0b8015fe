"""``inlet verify``: check that replicated Hudi tables equal their PostgreSQL source, and repair them.

- :mod:`.compare`: row hashes, primary-key range chunks and their checksums, row-by-row diffs (Arrow
  tables in, keys out; no I/O).
- :mod:`.source`: the source tables and their rows, rendered as the initial load renders them.
- :mod:`.lake`: the lake tables' live rows, as Inlet's snapshot reader returns them.
- :mod:`.verifier`: the per-table procedure (compare, recheck, repair) and its report.
- :mod:`.repair`: the one upsert commit that makes a table equal again.

The command line is :mod:`inlet.services.cli.verify`.
"""
