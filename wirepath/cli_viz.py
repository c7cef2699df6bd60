"""The ``viz``-related verbs of the command line."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add this module's verbs to ``verbs`` (and algorithms to ``infer``'s ``algos``)."""
