"""desired state = f(services, endpointslices, node, config): pure, no kopf, no kernel."""

from nftproxy.compiler.build import Desired, compile_tables
from nftproxy.compiler.config import ProxyConfig

__all__ = ["Desired", "ProxyConfig", "compile_tables"]
