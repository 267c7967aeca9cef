"""The trust rules: read and write policy, redaction, write-back screens, grounding."""
