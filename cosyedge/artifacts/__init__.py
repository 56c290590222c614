"""Self-describing artifacts (being split: everything is in contract.py for this one commit)."""

from cosyedge.artifacts.contract import *  # noqa: F401,F403
