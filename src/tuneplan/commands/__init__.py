"""CLI subcommands, one module each; each has `register(subparsers)`."""
