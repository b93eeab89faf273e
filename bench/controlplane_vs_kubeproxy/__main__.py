"""``python -m bench.controlplane_vs_kubeproxy``: as ``python -m bench controlplane_vs_kubeproxy`` without the
result file."""

import sys

from bench.controlplane_vs_kubeproxy import main

sys.exit(main())
