# nftproxy: the image the Helm chart (charts/nftproxy) runs, one pod per node.
#   docker build -t REGISTRY/nftproxy:$(make -s version) --build-arg VERSION=$(make -s version) .
# BASE: a Debian trixie image (default debian:trixie-slim; hack/images.sh builds an equivalent one
# locally with mmdebstrap for the test cluster: --build-arg BASE=localhost/nftproxy-base:trixie).
# Debian trixie: python3 3.13, nftables 1.1.x: the nft CLI (debugging: `nft list table ip
# nftproxy`), libnftables1 and its Python binding (python3-nftables, pure Python over ctypes). The
# node's own nft may be older (bookworm's 1.0.6): the table is declared so that both write and read
# it alike (every set with typeof; nft >= 1.1.2's `type` declarations crash nft <= 1.1.1 listing
# the ruleset: docs/image.md, tests/netns/test_nft_versions.py).
# Two stages: pip and the build tools stay in the first; the image is the second, with only what
# the proxy runs (see "Runtime packages" below). Every new node pulls it before any Service works
# on it, so it is kept small (README: "The image").
ARG BASE=debian:trixie-slim

# ------------------------------------------------------------------ build: pip install, thrown away
FROM ${BASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml LICENSE ./
COPY nftproxy ./nftproxy
# The project and its pinned runtime dependencies (pyproject.toml, no dev extras) under
# /staging/usr/local (Debian's pip installs into /usr/local), no bytecode (the image compiles only
# what the proxy imports, below). kubernetes/aio is the client's asyncio twin (41 MB of its 76):
# nftproxy uses the synchronous client (nftproxy/operator/kube.py) and kopf its own aiohttp calls.
RUN PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    pip install --break-system-packages --no-compile --no-warn-script-location --root /staging . \
 && site=$(echo /staging/usr/local/lib/python3.*/dist-packages) \
 && test -d "$site/kubernetes" && rm -rf "$site/kubernetes/aio" \
 && find /staging \( -name '*.pyc' -o -name '*.pyi' \) -delete \
 && test -x /staging/usr/local/bin/nftproxy

# ------------------------------------------------------------------ the image
FROM ${BASE}
# Runtime packages, each for something the proxy runs:
#   nftables, libnftables1, python3-nftables  nft CLI and libnftables (the ruleset; debugging)
#   python3, python-is-python3                the interpreter (the chart runs `python -m nftproxy`)
#   iptables        `nftproxy cleanup --kube-proxy` removes kube-proxy's iptables rules
#   iproute2        `ip link` of the same cleanup (kube-proxy's IPVS interface)
#   (no conntrack tool: stale UDP conntrack entries go over ctnetlink, nftproxy/nft/conntrack.py)
#   netbase         /etc/protocols and /etc/services. Without them nft lists "6" for tcp, so a table
#                   read back never equals the desired one and every full sync re-sends every element.
# No docs, man pages or locales (dpkg path-exclude, as debian:*-slim has it); no apt lists or caches.
RUN printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
      'path-exclude=/usr/share/lintian/*' > /etc/dpkg/dpkg.cfg.d/nftproxy-nodoc \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python-is-python3 python3-nftables nftables iptables iproute2 netbase \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old \
      /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \
 && find /usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} + \
 && rm -rf /usr/lib/python3.*/pydoc_data /usr/lib/python3.*/ensurepip /usr/lib/python3.*/idlelib \
      /usr/lib/python3.*/turtledemo /usr/lib/python3.*/lib2to3 /usr/lib/python3.*/tkinter

COPY --from=build /staging/usr/local /usr/local
# Bytecode only for what `nftproxy run` imports (the root filesystem is read-only in the pod: what
# is not compiled here is compiled at every start), those it imports after its first sync
# (operator/boot.py: kopf, the handlers, the servers) and the other commands' modules that build
# its parser (not what they import when they run) included. Then: the binding loads
# libnftables.so.1. `explain` (kubectl exec) also needs the generated API classes: checked without
# writing bytecode.
RUN python3 -c 'import nftproxy.cli, nftproxy.migration, nftproxy.operator.main, nftproxy.operator.kube, nftables' \
 && python3 -c 'import nftproxy.operator.early, nftproxy.operator.handlers, nftproxy.operator.health' \
 && python3 -c 'import nftproxy.operator.status, nftproxy.operator.kubeproxy_watch, nftproxy.localhost_proxy, tenacity' \
 && python3 -c 'import nftproxy.cli.explain, nftproxy.cli.trace, nftproxy.cli.selftest' \
 && python3 -B -c 'import nftproxy.cli.explain, nftproxy.cli.trace, nftproxy.cli.verify' \
 && python3 -B -c 'from kubernetes.client import CoreV1Api, DiscoveryV1Api, CustomObjectsApi' \
 && python3 -B -c 'import nftables; nftables.Nftables().set_dry_run(True)' \
 && nft --version && python3 -B -m nftproxy --help >/dev/null

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8

# OCI annotations. VERSION: nftproxy's __version__ (`make -s version`; hack/images.sh passes it), checked
# against the installed package so that a label never names another release; SOURCE: the git remote.
ARG VERSION=
ARG SOURCE=
RUN test -z "$VERSION" || python3 -B -c 'import sys, nftproxy; sys.exit(sys.argv[1] != nftproxy.__version__ and f"VERSION {sys.argv[1]} is not nftproxy {nftproxy.__version__}")' "$VERSION"
LABEL org.opencontainers.image.title="nftproxy" \
      org.opencontainers.image.description="A kube-proxy replacement that programs nftables with verdict maps in atomic transactions" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="debian:trixie"

# Root, because programming nftables needs CAP_NET_ADMIN in the host's network namespace; the
# chart grants that capability alone (all others dropped, read-only root filesystem).
USER 0
ENTRYPOINT ["python3", "-m", "nftproxy"]
CMD ["run"]
