"""The job runner and the background jobs: formation, consolidation, the daily merge."""
