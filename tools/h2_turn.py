"""A RunStream turn's HTTP/2 work alone, for counting its instructions (callgrind).

Each turn is what the daemon's h2 does for one turn of ``bench tool-loop`` over
gRPC, set as grpclib's listener sets h2: take in the request (HEADERS of the bench
client's ten headers, every one from HPACK's dynamic table after the first, and a
DATA frame with END_STREAM), then send the initial metadata and the trailers.
``--direct`` does it the daemon's way (``transport/grpc/_hpack.py`` and
``_headers.py``), without it through h2 alone. The per-turn count is the
difference of two runs divided by the difference of their turns::

    PYTHONPATH=src:generated/python valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/t100 python tools/h2_turn.py 100 [--direct]
    (and 300; then (Ir(300) - Ir(100)) / 200)
"""

from __future__ import annotations

import argparse

from h2.config import H2Configuration
from h2.connection import H2Connection

from palyra.transport.grpc._headers import headers_frame
from palyra.transport.grpc._hpack import remember_headers

REQUEST = [(":method", "POST"), (":scheme", "http"),
           (":path", "/palyra.v1.GatewayService/RunStream"), (":authority", "127.0.0.1:5000"),
           ("te", "trailers"), ("content-type", "application/grpc"),
           ("user-agent", "grpc-python-grpclib"), ("authorization", "Bearer bench-admin-token"),
           ("x-palyra-principal", "user:bench"), ("x-palyra-device-id", "01J00000000000000000000000")]
INITIAL = [(":status", "200"), ("content-type", "application/grpc")]
TRAILERS = [("grpc-status", "0")]
BODY = b"\x00\x00\x00\x00\x40" + b"x" * 64
GRPCLIB = {"header_encoding": "ascii", "validate_inbound_headers": False,
           "validate_outbound_headers": False, "normalize_inbound_headers": False,
           "normalize_outbound_headers": False}


def main() -> None:
    """Run the turns (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("turns", type=int)
    parser.add_argument("--direct", action="store_true", help="the daemon's way")
    args = parser.parse_args()
    client = H2Connection(H2Configuration(client_side=True, **GRPCLIB))
    server = H2Connection(H2Configuration(client_side=False, **GRPCLIB))
    if args.direct:
        server.decoder = remember_headers(server.decoder)
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.data_to_send()
    requests = []
    for _ in range(args.turns):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, REQUEST)
        client.send_data(stream_id, BODY, end_stream=True)
        requests.append((stream_id, client.data_to_send()))
        client.reset_stream(stream_id)  # frees the client's slot; the server never sees it
        client.data_to_send()
    for stream_id, wire in requests:
        server.receive_data(wire)
        if args.direct:
            assert headers_frame(server, stream_id, INITIAL, False) is not None
            assert headers_frame(server, stream_id, TRAILERS, True) is not None
        else:
            server.send_headers(stream_id, INITIAL)
            server.send_headers(stream_id, TRAILERS, end_stream=True)
        server.data_to_send()


if __name__ == "__main__":
    main()
