"""Thin click command-line layer over the cosyedge Python API (no logic lives here)."""
