"""``python -m bench.churn_vs_kubeproxy``: as ``python -m bench churn_vs_kubeproxy`` without the result file."""

import sys

from bench.churn_vs_kubeproxy import main

sys.exit(main())
