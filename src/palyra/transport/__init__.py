"""Transports: the gRPC and HTTP gateways, and the auth they share.

They translate only: requests into application calls, errors into wire
statuses. They know nothing of the journal, Cedar or providers.
"""
