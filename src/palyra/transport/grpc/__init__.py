"""gRPC gateway (grpclib) over the generated, typed ``<Service>Server`` classes."""

from palyra.transport.grpc._channel import CorkedChannel
from palyra.transport.grpc._codec import CappedProtoCodec, ClientCodec
from palyra.transport.grpc.server import GrpcGateway

__all__ = ["CappedProtoCodec", "ClientCodec", "CorkedChannel", "GrpcGateway"]
