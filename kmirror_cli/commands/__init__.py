"""One module per `kmirror` subcommand; each exposes `register(subparsers)`."""
