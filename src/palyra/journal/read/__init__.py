"""The journal's read room: read transactions, live followers, the entity cache, bundle export."""
