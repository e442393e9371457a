"""The engine's run room: one run's I/O (writer, step, loop, tool flow, actor, recovery)."""
