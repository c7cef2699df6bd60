"""``wirepath capture live``: the live capture agent's command line."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sources: argparse._SubParsersAction) -> None:
    """Add ``capture live`` to the ``capture`` verb's sub-verbs."""
