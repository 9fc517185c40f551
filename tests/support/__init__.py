"""Test helpers shared by tests and benchmarks (real servers, no mocks)."""
