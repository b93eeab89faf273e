# The two commands of a fresh machine (see README): `make demo` and `make test`.
# `make check`: the fast tier (lint, types, unit tests, a short fuzz run; no root, apt or Kubernetes).
.PHONY: conformance conformance-other upstream-e2e upstream-e2e-reference fuzz-differential check demo demo-down demo-quick demo-quick-down demo-apply images e2e-images k8s-tools e2e-tools prom-tools test test-fresh test-e2e-alone bench bench-cluster install lint version release

# The main job: a real cluster on this machine (kubelet nodes, images built here, helm install).
demo: install k8s-tools
	.venv/bin/python -m demo.realcluster

demo-down: install
	.venv/bin/python -m demo.realcluster --down

# The quick one: control plane + node namespaces + `nftproxy run` (no kubelet, no image).
demo-quick: install k8s-tools
	.venv/bin/python -m demo.quick

demo-quick-down: install
	.venv/bin/python -m demo.quick --down

images: install
	bash hack/images.sh

demo-apply: install
	.venv/bin/python -m demo.apply

k8s-tools:
	bash hack/k8s-tools.sh

# Upstream's e2e.test, agnhost and CoreDNS (from the Go module proxy, beside the k8s-tools).
e2e-tools:
	bash hack/e2e-tools.sh

# Prometheus' promtool and prometheus (from the Go module proxy): tests/monitoring checks the chart's alerts.
prom-tools:
	bash hack/prom-tools.sh

# The images e2e.test runs, under the framework's names (e2e-images.json beside images.json).
e2e-images: install
	bash hack/e2e-images.sh

test:
	bash hack/test.sh

# The differential suite alone (tests/conformance: nftproxy beside the real kube-proxy of
# K8S_VERSION, default K8S_DEFAULT of hack/k8s-versions.sh), and against the other release
# (K8S_OTHER: kube-proxy v1.38 while the default is v1.37.2). Each builds its Kubernetes first.
conformance: install
	bash hack/k8s-tools.sh
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/conformance

conformance-other: install
	. hack/k8s-versions.sh && K8S_VERSION=$$K8S_OTHER $(MAKE) conformance

# Upstream's [sig-network] e2e suite (e2e.test built here) on a real cluster with nftproxy as the
# Service proxy; hack/e2e-skips.txt says what is skipped and why. Last line:
# `upstream e2e: N passed, M failed, K skipped`; JUnit in _output/upstream-e2e/nftproxy. Three nodes
# (one zone each: Traffic Distribution runs) and localhost NodePorts on (both proxies).
upstream-e2e: install k8s-tools e2e-tools
	.venv/bin/python -m testkit.realcluster.upstream --proxy nftproxy --selection full --nodes 3 --localhost-nodeports

# The same selection with the real kube-proxy (DaemonSet, image built here): the reference.
upstream-e2e-reference: install k8s-tools e2e-tools
	.venv/bin/python -m testkit.realcluster.upstream --proxy kube-proxy --selection full --nodes 3 --localhost-nodeports

# The fresh-machine case, checked (docs/testing.md): a clean clone with an empty NFTPROXY_CACHE.
test-fresh:
	bash hack/test-fresh.sh

# Each tests/e2e module alone, each on an empty images cache.
test-e2e-alone:
	bash hack/test-fresh.sh e2e-alone

check:
	bash hack/check.sh

# The release's artefacts in dist/ (docs/release.md): the chart package, the image as a docker archive,
# its SBOM (SPDX JSON, syft built from the Go module proxy) and SHA256SUMS. Refuses a working tree
# with uncommitted changes.
release: install k8s-tools
	bash hack/release.sh

# The release's version, from its one source (nftproxy/__init__.py): `make -s version`.
version:
	@python3 -B -c 'import nftproxy; print(nftproxy.__version__)'

# The long run of the differential fuzzer (docs/testing.md): WORLDS random worlds from SEED (default:
# the time), in pytest batches of BATCH_MINUTES, each under the heavy lock (released between
# batches); prints worlds, objects the apiserver refused, probes compared, matches, accepted and
# unexplained differences. Logs in _output/fuzz-differential.
WORLDS ?= 200
BATCH_MINUTES ?= 10
fuzz-differential: install k8s-tools
	.venv/bin/python -m tests.conformance.worlds run --worlds $(WORLDS) --batch-minutes $(BATCH_MINUTES) $(if $(SEED),--seed $(SEED))

bench: install
	.venv/bin/python -m bench dataplane

bench-cluster: install k8s-tools
	flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench realcluster

install:
	bash hack/install.sh

lint: install
	.venv/bin/ruff check nftproxy testkit tests bench demo
	.venv/bin/ruff format --check nftproxy testkit tests bench demo
	.venv/bin/mypy
	.venv/bin/lint-imports
