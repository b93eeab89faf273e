from nftproxy.cli import entry

entry()
