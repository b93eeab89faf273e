#!/usr/bin/env bash
# Installs everything nftproxy's tests and demo need on a fresh Debian machine:
# apt packages, the project virtualenv (.venv) and the libnftables Python module inside it.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# conntrack (the CLI): not used by nftproxy (ctnetlink in the process); the "before" column of
# bench/udp_rollout.py runs it, and it is handy to look at a lab's entries by hand.
APT_PKGS=(nftables python3-nftables libnftables1 iproute2 conntrack etcd-server openssl procps
  # the real cluster (docs/testing.md, hack/images.sh): node runtimes, CNI, image builds
  containerd runc containernetworking-plugins iptables util-linux mmdebstrap buildah busybox-static)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.nftproxy-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> pip install -e .[dev]"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi

# Debian's python3-nftables is pure Python over ctypes (libnftables.so.1); it installs only for the
# system interpreter, and PyPI's copies are too old (no set_dry_run). Link it into the venv.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
src=$(dpkg -L python3-nftables | grep -E '/nftables/__init__.py$' | head -1 | xargs dirname)
if [ ! -e "$site/nftables" ]; then
  ln -s "$src" "$site/nftables"
fi
.venv/bin/python -c 'import nftables; n = nftables.Nftables(); n.set_dry_run(True)' \
  || { echo "libnftables Python module not usable from .venv" >&2; exit 1; }
