"""The message path: router, turn order, access, commands, the turn, its prompt, delivery, tools."""
