"""File groups: names, the file-system view of slices, and reading a slice."""
