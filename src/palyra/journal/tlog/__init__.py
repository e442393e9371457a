"""The journal's transparency log: an RFC 9162 Merkle tree over its records (pure parts)."""
