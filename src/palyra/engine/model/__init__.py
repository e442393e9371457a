"""The engine's pure room: data and decisions, no asyncio, no journal, no store handle."""
