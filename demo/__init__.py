"""The demos (not the test kit): `make demo` (demo.realcluster), `make demo-quick` (demo.quick),
`make demo-apply` (demo.apply). They use the test kit to build what they show."""
