"""``python -m workbench`` runs the command line (same as ``workbench``)."""

from .cli import main

raise SystemExit(main())
