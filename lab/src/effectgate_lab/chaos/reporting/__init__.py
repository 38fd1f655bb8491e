"""A run recorded, summarised with intervals, and rendered into tables and docs."""
