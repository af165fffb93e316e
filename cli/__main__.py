"""``python -m geonp_cli``: the same as the ``geonp`` command."""

from geonp_cli.main import main

main()
