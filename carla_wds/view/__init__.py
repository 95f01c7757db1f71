"""`carla-wds view`: a static HTML report of a pack (samples chosen across routes, commands
and speeds, with cameras, bird's-eye panels in each layout's own axes and label histograms)."""
from __future__ import annotations

from .page import view
from .scan import ViewError, choose

__all__ = ["ViewError", "choose", "view"]
