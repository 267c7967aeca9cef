"""Memory at turn time: the session budget, and long-term memory as people and the model reach it."""
