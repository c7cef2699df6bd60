"""Writing output files whole or not at all (``tracefmt.write_atomic``, for viz)."""

from __future__ import annotations

from tracefmt._files import write_atomic

__all__ = ["write_atomic"]
