# The two commands of a fresh machine (see README): `make demo` and `make test`.
.PHONY: demo demo-down demo-apply k8s-tools test bench install lint

demo: install k8s-tools
	.venv/bin/python -m testkit.demo

demo-down: install
	.venv/bin/python -m testkit.demo --down

demo-apply: install
	.venv/bin/python -m testkit.demo_apply

k8s-tools:
	bash hack/k8s-tools.sh

test:
	bash hack/test.sh

bench: install
	.venv/bin/python -m bench.dataplane

install:
	bash hack/install.sh

lint: install
	.venv/bin/ruff check nftproxy testkit tests bench
	.venv/bin/mypy
