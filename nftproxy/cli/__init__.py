"""The commands (``nftproxy render | apply | run | verify | list | explain | trace | cleanup``): argparse,
I/O and printing. The top floor: nothing in nftproxy imports it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from nftproxy import __version__, heap
from nftproxy.cli import kubeproxy_config
from nftproxy.cli.flags import (
    add_proxy_flags,
    add_run_flags,
    config_from_args,
    flag_values,
    given_dests,
    settings_from_args,
)
from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.compiler.build import Desired
from nftproxy.compiler.config import this_node
from nftproxy.dataplane.requirements import Unsupported
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import Inputs, ManifestError, load
from nftproxy.nft.backend import NftError, PartialLoadError
from nftproxy.nft.conntrack import KernelConntrack
from nftproxy.nft.diff import plan
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator.sockets import ListenError


def _load(args: argparse.Namespace) -> Inputs:
    """Read and parse every -f input (``heap.bulk_decode``)."""
    with heap.bulk_decode():
        return load(args.file, args.service_proxy_name)


def _merged(config: ProxyConfig, inputs: Inputs) -> ProxyConfig:
    """The flags with the Node and the ServiceCIDRs among the inputs, as the operator merges them."""
    node = this_node(inputs.nodes, config.node_name)
    return config.for_node(node).with_service_cidrs(n for c in inputs.service_cidrs for n in c.cidrs)


def _compile(args: argparse.Namespace) -> tuple[Inputs, Desired]:
    config = config_from_args(args)
    inputs = _load(args)
    config = _merged(config, inputs)
    desired = compile_tables(inputs.services, inputs.slices, config, inputs.ignored)
    for s in (*inputs.skipped, *desired.skipped):
        print(f"nftproxy: skipped {s}", file=sys.stderr)
    return inputs, desired


def cmd_render(args: argparse.Namespace) -> int:
    _, desired = _compile(args)
    for table in desired.tables:
        sys.stdout.write(plan(None, table).render())
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    inputs = _load(args)
    backend, conntrack = KernelBackend(), KernelConntrack()
    try:
        dp = Dataplane(backend, _merged(config, inputs), conntrack)
        for svc in inputs.services:
            dp.inputs.set_service(svc)
        for key in inputs.ignored:
            dp.inputs.ignore_service(key)
        for sl in inputs.slices:
            dp.inputs.set_slice(sl)
        # A new process knows nothing of the kernel: this sync reads the table back and sends
        # only the difference (elements added/removed; the fixed chains are kept when unchanged).
        # It compiles too (a first load in chunks, each loading while the next compiles): the
        # stats come after it, or they would compile everything first, on their own.
        result = dp.sync()
        n_svc, n_eps, skipped = dp.stats()
        for s in (*inputs.skipped, *skipped):
            print(f"nftproxy: skipped {s}", file=sys.stderr)
    finally:
        backend.close()
        conntrack.close()
    print(
        f"nftproxy: applied {n_svc} Services, {n_eps} endpoints: "
        f"{result.operations} operations, {result.element_changes} element changes, "
        f"{result.seconds * 1000:.1f} ms"
    )
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    if args.kube_proxy:
        from nftproxy import migration  # noqa: PLC0415

        report = migration.cleanup(args.netns)
        sys.stdout.write(report.render())
        return 1 if report.errors else 0
    backend = KernelBackend(args.netns)
    try:
        removed = Dataplane(backend, ProxyConfig(table=args.table)).cleanup()
    finally:
        backend.close()
    print(f"nftproxy: removed {', '.join(f'{f.value} {args.table}' for f in removed) or 'nothing'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from nftproxy.operator import early, kube  # noqa: PLC0415

    heap.tune()  # before the first thread (the lists')
    loaded = getattr(args, "kube_proxy_config", None)
    settings = replace(
        settings_from_args(args),
        configz=kubeproxy_config.effective(args, loaded),
        flagz=flag_values(args),
        config_warnings=tuple(loaded.warnings) if loaded else (),
    )
    # the first lists, before kopf is imported (operator/boot.py): started by
    # `python -m nftproxy` before these imports (operator/early.py), or now
    proxy_name = settings.proxy.service_proxy_name
    lists = early.take(settings.kubeconfig, settings.node_name, proxy_name)
    if lists is None:
        lists = early.lists(kube.connect(settings.kubeconfig), settings.node_name, proxy_name)
    from nftproxy.operator.main import run  # noqa: PLC0415  (kopf is imported after the first sync)

    return run(settings, lists.api, lists=lists)


def cmd_verify(args: argparse.Namespace) -> int:
    from nftproxy.cli import verify  # noqa: PLC0415

    return verify.main(args, config_from_args(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nftproxy",
        description="A kube-proxy replacement: programs a node's nftables for Kubernetes Services, "
        "each change in one atomic transaction. `run` is the per-node operator; the other commands "
        "render, apply, verify, list, explain, trace and clean up its tables (`selftest`: what `helm test` runs).",
    )
    parser.add_argument("--version", action="version", version=f"nftproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, text in (
        ("render", cmd_render, "print the nft script for the given objects; touches nothing"),
        ("apply", cmd_apply, "make this network namespace's nftproxy tables match, in one transaction"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("-f", "--file", action="append", required=True, metavar="FILE", help="YAML/JSON, '-' for stdin")
        add_proxy_flags(p)
        p.set_defaults(fn=fn)
    p = sub.add_parser("run", help="the per-node operator: watch the API, keep nftables in sync")
    add_run_flags(p)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("verify", help="compare the kernel's table with the API (exit 0: in sync, 1: differences)")
    add_run_flags(p)  # the same flags as `run`: they shape the table
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="retry until in sync, this long")
    p.set_defaults(fn=cmd_verify)
    from nftproxy.cli import explain as explain_cmd  # noqa: PLC0415

    p = sub.add_parser("explain", help="one Service's path through this node's tables, in words and as a tree")
    explain_cmd.add_flags(p)
    p.set_defaults(fn=explain_cmd.run)
    from nftproxy.cli import trace as trace_cmd  # noqa: PLC0415

    p = sub.add_parser("trace", help="trace the next new connections to a Service address, in nftproxy's terms")
    trace_cmd.add_flags(p)
    p.set_defaults(fn=trace_cmd.run)
    from nftproxy.cli import list as list_cmd  # noqa: PLC0415

    text = "every Service frontend programmed on this node (read from the kernel), with backends and policy"
    p = sub.add_parser(
        "list", help=text, description=list_cmd.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    list_cmd.add_flags(p)
    p.set_defaults(fn=list_cmd.run)
    from nftproxy.cli import selftest as selftest_cmd  # noqa: PLC0415

    p = sub.add_parser("selftest", help="what `helm test` runs: a Service answers via the proxy, every node in sync")
    selftest_cmd.add_flags(p)
    p.set_defaults(fn=selftest_cmd.run)
    p = sub.add_parser("cleanup", help="remove nftproxy's tables and nothing else")
    p.add_argument("--table", default="nftproxy", help=argparse.SUPPRESS)
    p.add_argument(
        "--kube-proxy", action="store_true", help="instead: remove what kube-proxy left (nft, iptables, IPVS)"
    )
    p.add_argument("--netns", help="in this named network namespace")
    p.set_defaults(fn=cmd_cleanup)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with ``--config``'s file read over the environment's values (a flag on
    the command line wins over the file); the file's warnings: ``kube_proxy_config.warnings``."""
    parser = build_parser()
    argv = [*(sys.argv[1:] if argv is None else argv)]  # (`list` here is the `list` command's module)
    args = parser.parse_args(argv)
    args.kube_proxy_config = None
    if getattr(args, "config", None):
        loaded = kubeproxy_config.load(args.config)
        kubeproxy_config.apply(loaded, args, given_dests(parser, argv), complete=args.command == "run")
        args.kube_proxy_config = loaded
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        loaded = args.kube_proxy_config
        if loaded is not None and args.command != "run":  # `run` logs them
            for warning in loaded.warnings:
                print(f"nftproxy: warning: {warning}", file=sys.stderr)
        return int(args.fn(args))
    except (ManifestError, argparse.ArgumentTypeError) as e:
        print(f"nftproxy: {e}", file=sys.stderr)
        return 2
    except ListenError as e:  # --bind-address-hard-fail
        print(f"nftproxy: {e}", file=sys.stderr)
        return 1
    except PartialLoadError as e:
        print(f"nftproxy: the kernel refused part of the first load: {e}", file=sys.stderr)
        return 1
    except NftError as e:
        print(f"nftproxy: the kernel refused the transaction, nothing changed: {e}", file=sys.stderr)
        return 1
    except PermissionError as e:
        print(f"nftproxy: {e} (needs CAP_NET_ADMIN)", file=sys.stderr)
        return 1
    except Unsupported as e:  # `run` on a node without what it needs (dataplane/requirements.py)
        print(f"nftproxy: {e}", file=sys.stderr)
        return 1


def entry() -> None:
    """The `nftproxy` command: main(), then exit without the interpreter's teardown. A 10k-Service
    apply leaves ~10^6 objects alive (frozen out of the GC); freeing them one by one at exit costs
    a noticeable part of an apply (docs/performance.md). Logs and output are flushed first."""
    rc = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    entry()
