"""geonp command-line interface (installed as the ``geonp_cli`` package)."""
