from nftproxy.cli import main
import sys
sys.exit(main())
