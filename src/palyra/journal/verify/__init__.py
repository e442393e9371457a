"""The journal's verify room: the streaming chain walk, bundle regrouping, covered-span digests."""
