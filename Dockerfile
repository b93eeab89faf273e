# nftproxy: the image the Helm chart (charts/nftproxy) runs, one pod per node.
#   docker build -t REGISTRY/nftproxy:0.1.0 .
# Debian bookworm for its nftables 1.0.6: the nft CLI (debugging: `nft list table ip nftproxy`),
# libnftables1 and its Python binding (python3-nftables, pure Python over ctypes), and conntrack
# (to flush stale UDP conntrack entries).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables python3-nftables conntrack iptables iproute2 \
 && rm -rf /var/lib/apt/lists/*

# python3-nftables installs only for Debian's /usr/bin/python3; this image runs /usr/local/bin/python
# (also 3.11). The module is pure Python over libnftables.so.1: link it into our site-packages, as
# hack/install.sh does for the development virtualenv, and check it loads the library.
RUN site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && ln -s /usr/lib/python3/dist-packages/nftables "$site/nftables" \
 && python -c 'import nftables; nftables.Nftables().set_dry_run(True)'

# The project, without its dev extras (pinned runtime dependencies from pyproject.toml).
WORKDIR /src
COPY pyproject.toml ./
COPY nftproxy ./nftproxy
RUN pip install . \
 && rm -rf /src /root/.cache \
 && python -c 'import nftproxy.cli'
WORKDIR /

# Root, because programming nftables needs CAP_NET_ADMIN in the host's network namespace; the
# chart grants that capability alone (all others dropped, read-only root filesystem).
USER 0
ENTRYPOINT ["python", "-m", "nftproxy"]
CMD ["run"]
