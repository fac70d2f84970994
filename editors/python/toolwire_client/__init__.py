"""A typed Python client for toolwire, for agent harnesses.

Types come from ``models`` (generated from toolwire's published JSON Schema
by ``generate.py``); ``ToolwireClient`` spawns ``toolwire serve`` and calls
each method with those types.
"""

from .client import ToolwireClient, ToolwireError

__all__ = ["ToolwireClient", "ToolwireError"]
