"""The ``palyra`` command: the daemon (``serve``) and a gRPC client for it."""
