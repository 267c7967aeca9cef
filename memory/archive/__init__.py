"""Messages that left a session: the archive and the daily Markdown files, and their search."""
