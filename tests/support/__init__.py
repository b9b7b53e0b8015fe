"""Helpers every test suite shares: the table model, the independent hudi-rs reads, the
Apache-Hudi-written test tables, and the core tests' small tables and subprocess runner."""
