"""The write path: prepare the batch, plan file groups, write files, commit.

The pipeline (the Spark engine runs the same steps distributed):

1. prepare (:mod:`.prepare`) — validate and evolve the schema, compute record keys and partition paths, merge
   duplicate keys by the table's merge mode. Everything that can reject the input happens here,
   before an instant exists.
2. plan (:mod:`.plan`, :mod:`.plan_mor`) — tag records with their file group (simple or bucket index), pack inserts into small
   file groups first, then new ones; replace operations list the file groups they replace.
3. execute (:mod:`.files`) — one :func:`write_file_group` per file group: marker, then the new base file
   (stored records merged with incoming ones; inserts are appended), returning a write stat.
4. commit (:mod:`.run`) — the commit protocol checks conflicts and writes the completed instant atomically.
   Any failure before that rolls the instant back; a crash leaves a pending instant that the
   next writer rolls back.

Merge-on-Read tables run the same steps as ``deltacommit`` instants (replace operations stay
``replacecommit``): :func:`plan_mor_write` sends updates and deletes of a file group to one new
log file of it (:func:`write_log_group`, blocks encoded by :mod:`inlet.core.log.writer`), and
inserts to new base files (simple index) or to the log files of their bucket's file group (bucket
index). The simple index looks keys up in the latest file slice (base file and log files, the
slices of :class:`~inlet.core.file_group.view.FileSystemView` that readers merge; log keys are read once
per process, see :mod:`inlet.core.index.simple`); the bucket index routes by bucket id without any lookup.

Hot paths are columnar: key lookups are Arrow hash probes (:func:`~inlet.core.index.simple.locate_keys`), merging stored
with incoming records matches keys with ``index_in``, log blocks are encoded a column at a time."""
