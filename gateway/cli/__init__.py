"""The operator's commands (`clawgate ...`)."""
