"""The engine's sessions room: one reader, one writer, one locked resolve."""
