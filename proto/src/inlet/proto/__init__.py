"""Inlet protobuf contracts (generated stubs live in versioned subpackages)."""
