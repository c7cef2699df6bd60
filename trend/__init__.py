"""Performance series over runs: MDL grouping, trimmed moving statistics, per-patch verdicts,
Mako's window deviation analysis, trend compliance and the dashboard.

Every function takes plain numbers or an Arrow table of the store's ``results/`` schema.
"""

from trend.mdl import DIRECTIONS, MdlGroup, MdlResult, classify_mdl

__all__ = ["DIRECTIONS", "MdlGroup", "MdlResult", "classify_mdl"]
