"""The journal's retention room: prefix pruning into hash tombstones, and its age policy."""
