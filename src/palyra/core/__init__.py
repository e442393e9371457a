"""Pure core: no I/O, no clock, no asyncio. Everything here is a function over data."""
