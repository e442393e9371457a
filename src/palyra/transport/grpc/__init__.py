"""gRPC gateway (grpclib) over the generated, typed ``<Service>Server`` classes."""

from palyra.transport.grpc.server import GrpcGateway

__all__ = ["GrpcGateway"]
