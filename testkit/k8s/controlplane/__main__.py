"""``python -m testkit.k8s.controlplane up|down|status --dir DIR`` (cli.py)."""

import sys

from testkit.k8s.controlplane.cli import main

sys.exit(main())
