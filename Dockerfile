# nftproxy: the image the Helm chart (charts/nftproxy) runs, one pod per node.
#   docker build -t REGISTRY/nftproxy:0.1.0 .
# BASE: any Debian bookworm image with python3.11 as `python` and pip (hack/images.sh builds one
# locally with mmdebstrap for the test cluster: --build-arg BASE=localhost/nftproxy-base:bookworm).
# Debian bookworm for its nftables 1.0.6: the nft CLI (debugging: `nft list table ip nftproxy`),
# libnftables1 and its Python binding (python3-nftables, pure Python over ctypes). No conntrack
# tool: stale UDP conntrack entries are listed and deleted over ctnetlink in the process
# (nftproxy/nft/conntrack.py).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# netbase: /etc/protocols and /etc/services. Without them nft lists "6" for tcp, so a table read
# back never equals the desired one and every full sync re-sends every map element.
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables python3-nftables netbase iptables iproute2 \
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
