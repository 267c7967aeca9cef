"""Consolidation into Memory.md: what goes, and the files it moves."""
