"""Helpers for tests and benchmarks; nothing in ``palyra`` itself imports this package.

``spawn.DaemonProcess`` runs ``palyra serve`` as a child process on ephemeral
ports and finds them through ``<data-dir>/daemon.json``; ``apps.scripted_app`` is a
whole app over a real journal and the scripted ``add`` model, in process.
"""
