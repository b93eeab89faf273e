import sys

from nftproxy.cli import main

sys.exit(main())
