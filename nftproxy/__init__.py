"""nftproxy: a kube-proxy replacement on nftables verdict maps."""

# The release's version (semantic versioning), its one source: the package metadata
# (pyproject.toml reads it), `nftproxy --version`, ProxyStatus status.version, the
# nftproxy_build_info metric and the image's label; the chart's appVersion must equal it
# (tests/unit/test_release.py). CHANGELOG.md has a section for it.
__version__ = "0.4.0"
