"""Exit 0 if a gRPC server answers SERVING on the standard health service (grpc.health.v1).

Used as the coordinator's container health check (compose) and exec probe (Kubernetes): the
coordinator serves TLS off loopback, which Kubernetes' built-in ``grpc`` probe cannot speak.

    python /opt/inlet/scripts/grpc_healthcheck.py --address 127.0.0.1:50551 --ca ca.pem --server-name coordinator
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default="127.0.0.1:50551", help="HOST:PORT of the gRPC server")
    p.add_argument("--service", default="", help="service name to check ('' = the whole server)")
    p.add_argument("--ca", help="PEM CA bundle to verify the server with (TLS); none = plaintext")
    p.add_argument("--server-name", help="name expected in the server certificate (TLS)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = p.parse_args(argv)
    if args.ca:
        with open(args.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
        channel = grpc.secure_channel(args.address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(args.address)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
    except grpc.RpcError as e:
        print(f"unhealthy: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
