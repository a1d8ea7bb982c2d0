"""One module per `kzlab` subcommand; each exposes `register(subparsers)`."""
