"""The write path: prepare a batch, plan it onto file groups, write files, commit."""
