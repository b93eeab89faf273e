# The two commands of a fresh machine (see README): `make demo` and `make test`.
.PHONY: demo demo-down test bench install lint

demo: install
	.venv/bin/python -m nftproxy.testing.demo_apply

test:
	bash hack/test.sh

bench: install
	.venv/bin/python -m bench.dataplane

install:
	bash hack/install.sh

lint: install
	.venv/bin/ruff check nftproxy tests bench
	.venv/bin/mypy
