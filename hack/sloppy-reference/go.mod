module nftproxy/hack/sloppy-reference

go 1.24

require k8s.io/utils v0.0.0-20260626114624-be93311217bd
