"""`kzlab rpc-server [--host 127.0.0.1] [--port 50052] [--threads N]`: serve ggml over RPC."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("rpc-server", help="start a ggml RPC server from kzlab's ggml build")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50052)
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.runtime.rpc import serve

    serve(args.host, args.port, args.threads)
    return 0
