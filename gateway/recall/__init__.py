"""Memory at turn time: recall, how it reaches the prompt, and its traces."""
