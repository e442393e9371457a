"""The journal's write room: preparing drafts, the one writer thread, the commit log and durability."""
