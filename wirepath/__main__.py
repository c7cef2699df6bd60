"""``python -m wirepath``."""

from wirepath.cli import run

run()
