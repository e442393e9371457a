"""gRPC gateway (grpclib) over the generated ``*ServiceBase`` classes."""

from palyra.transport.grpc._services import SERVICE_BASES, build_services, rpc_methods
from palyra.transport.grpc.server import GrpcGateway

__all__ = ["SERVICE_BASES", "GrpcGateway", "build_services", "rpc_methods"]
