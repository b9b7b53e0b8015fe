"""Record merging by merge mode: batch dedupe, and the base + log merge of a file slice."""
