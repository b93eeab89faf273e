"""A packet tracer over a compiled ``Table``: what the kernel would do with the first packet of a
connection, without a kernel.

Modelled on kube-proxy's own test tracer (pkg/proxy/nftables/helpers_test.go, ``nftablesTracer``):
it does not parse nft in general, only the dialect our compiler writes (compiler/skeleton.py,
balancing.py), statement by statement. Every rule of the table is parsed when the tracer is
built, so a rule it does not understand raises ``Unsupported`` at once, whether a packet would
reach it or not: a change to the compiler's rules either teaches the tracer or fails the tests.

The walk follows netfilter for a new connection (``ct state new`` is true, nat chains run):

* arriving on an interface (a pod's or an outside client's packet): the prerouting base chains by
  priority, the DNAT, then the input chains if the (translated) destination is one of the node's
  addresses, else the forward chains and postrouting;
* locally generated (``Packet(local=True)``): output, DNAT, postrouting; a destination on the node
  then comes back through lo (the filter chains of prerouting, and input; NAT is set up already).

A verdict map, ``jump``/``goto``/``return``, sets (concatenations, interval sets with prefixes),
an address compared with a prefix (``ip daddr 127.0.0.0/8``), ``iifname`` (with nft's ``*``
wildcard; the packet's ``iif``), named counters (a no-op),
``fib … type local`` (by the addresses the tracer is told are the node's), packet marks, ``ct
status dnat``, DNAT through endpoint maps, masquerade, and ``update @affinity`` (kept by the
tracer, so a second trace of the same client follows it) are interpreted. ``numgen`` and
``jhash`` choose a slot: the tracer follows every slot and reports each outcome, so a Service with
three endpoints gives the set of the three.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import NoReturn

from nftproxy.nft.objects import Family, Key, Set, Table

PROTOCOLS = ("tcp", "udp", "sctp")
HOOK_ORDER = {"prerouting": 0, "input": 1, "forward": 1, "output": 0, "postrouting": 2}


class Unsupported(ValueError):
    """A rule (or a map's verdict) the tracer does not understand: never skipped silently."""


@dataclass(frozen=True)
class Packet:
    """The first packet of a connection; ``local``: sent by the node itself (the output path);
    ``iif``: the interface an arriving packet came in on (``iifname``; none on the output path,
    ``lo`` when a local packet comes back in)."""

    src: str
    dst: str
    port: int
    proto: str = "tcp"
    local: bool = False
    iif: str = "eth0"


@dataclass(frozen=True)
class Outcome:
    """One way the packet can go (one per endpoint slot chosen)."""

    verdict: str  # "accept", "drop", "reject"
    dnat: tuple[str, int] | None  # the endpoint, if translated
    masqueraded: bool
    delivered: str | None  # "local" (to the node) or "forward", when accepted
    path: tuple[str, ...]  # "chain: rule" of every rule that matched, in order

    @property
    def target(self) -> str:
        """kube-proxy's tracer's words: the endpoint ("10.244.1.2:8080", "[fd00::2]:80"),
        or ACCEPT (unchanged), DROP, REJECT."""
        if self.verdict != "accept":
            return self.verdict.upper()
        if self.dnat is None:
            return "ACCEPT"
        addr, port = self.dnat
        return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


@dataclass(frozen=True)
class Trace:
    packet: Packet
    outcomes: tuple[Outcome, ...]

    @property
    def targets(self) -> set[str]:
        return {o.target for o in self.outcomes}

    @property
    def output(self) -> str:
        """Every possible target, sorted and joined as kube-proxy's tracer writes them."""
        return ", ".join(sorted(self.targets))

    @property
    def masq(self) -> bool:
        """Masqueraded? (the same for every outcome, or this raises: say which one you mean)."""
        m = {o.masqueraded for o in self.outcomes}
        if len(m) != 1:
            raise AssertionError(f"masquerade differs between the outcomes: {self.describe()}")
        return m.pop()

    def describe(self) -> str:
        lines = [f"{self.packet}:"]
        for o in self.outcomes:
            lines.append(f"  {o.target} masq={o.masqueraded} delivered={o.delivered}")
            lines += [f"    {r}" for r in o.path]
        return "\n".join(lines)


# -- evaluation state of one packet ------------------------------------------------------


class _Verdict(Exception):
    """A terminal verdict for the hook (accept, drop, reject, or a NAT statement's accept)."""

    def __init__(self, verdict: str) -> None:
        super().__init__(verdict)
        self.verdict = verdict


class _Return(Exception):
    pass


class _NoMatch(Exception):
    pass


@dataclass
class _State:
    packet: Packet
    saddr: str
    daddr: str
    dport: int
    orig_daddr: str
    orig_dport: int
    choose: Callable[[int], int]
    mark: int = 0
    dnat: tuple[str, int] | None = None
    masqueraded: bool = False
    hook: str = ""
    path: list[str] = field(default_factory=list)

    def iif(self) -> str:
        """The input interface's name as ``iifname`` sees it here: none on the output path, ``lo``
        for the node's own packet coming back in, else the one it arrived on."""
        if not self.packet.local:
            return self.packet.iif
        return "lo" if self.hook in ("prerouting", "input") else ""


Value = str | int
Expr = Callable[[_State], Value]
Stmt = Callable[[_State], None]


# -- the rule dialect ----------------------------------------------------------------------

_TOKEN = re.compile(r"[{}]|,|[^\s{},]+")


class _Parser:
    """Turns one rule's text into statements (closures over the tracer), or raises Unsupported."""

    def __init__(self, tracer: Tracer, text: str) -> None:
        self.t = tracer
        self.text = text
        self.tokens = _TOKEN.findall(text)
        self.i = 0

    # tokens
    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.tokens[j] if j < len(self.tokens) else None

    def take(self, *want: str) -> str:
        tok = self.peek()
        if tok is None or (want and tok not in want):
            self.fail(f"expected {' or '.join(want) or 'more'}, got {tok!r}")
        self.i += 1
        return tok

    def fail(self, why: str) -> NoReturn:
        raise Unsupported(f"{why} at token {self.i} of rule {self.text!r}")

    # the rule: statements until the end
    def rule(self) -> list[Stmt]:
        out: list[Stmt] = []
        while self.peek() is not None:
            out.append(self.statement())
        if not out:
            self.fail("empty rule")
        return out

    def statement(self) -> Stmt:
        tok = self.peek()
        if tok in ("accept", "drop", "reject", "return", "jump", "goto"):
            return self.verdict()
        if tok == "dnat":
            return self.dnat()
        if tok == "masquerade":
            self.take()
            if self.peek() == "fully-random":
                self.take()

            def masquerade(s: _State) -> None:
                s.masqueraded = True
                raise _Verdict("accept")

            return masquerade
        if tok == "update":
            return self.update()
        if tok == "counter":  # `counter name "X"`: a named counter the table declares; counts only
            self.take()
            self.take("name")
            name = self.take().strip('"')
            if name not in self.t.table.counters:
                self.fail(f"a counter the table does not declare: {name}")
            return lambda s: None
        if tok == "ct" and self.peek(1) == "state":
            self.i += 2
            states = self.values()
            return self.test(lambda s: "new", states, negate=False)  # a trace is of a new connection
        if tok == "ct" and self.peek(1) == "status":
            self.i += 2
            if self.take() != "dnat":
                self.fail("ct status other than dnat")
            return self.test(lambda s: "dnat" if s.dnat is not None else "", {"dnat"}, negate=False)
        if tok == "meta" and self.peek(1) == "mark" and self.peek(2) == "set":
            return self.mark_set()
        if tok == "meta" and self.peek(1) == "mark" and self.peek(2) == "&":
            self.i += 3
            mask = int(self.take(), 0)
            self.take("==")
            want = int(self.take(), 0)
            return self.test(lambda s: s.mark & mask, {want}, negate=False)
        if tok == "iifname":  # `iifname [!=] "name"`, a trailing * matching any rest (nft's wildcard)
            self.take()
            negate = self.peek() == "!="
            if negate:
                self.take()
            quoted = self.take()
            if not (len(quoted) > 2 and quoted[0] == quoted[-1] == '"'):
                self.fail(f"iifname with {quoted}, not a quoted name")
            pattern = quoted[1:-1]

            def iifname(s: _State) -> None:
                name = s.iif()
                hit = name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern
                if hit == negate:
                    raise _NoMatch

            return iifname
        if tok == "fib":
            self.take()
            which = self.take("saddr", "daddr")
            self.take("type")
            kinds = self.values()

            def fib(s: _State) -> Value:
                addr = s.saddr if which == "saddr" else s.daddr
                return "local" if self.t.is_local(addr) else "unicast"

            return self.test(fib, kinds, negate=False)
        return self.relation()

    def verdict(self) -> Stmt:
        word = self.take()
        if word in ("jump", "goto"):
            chain = self.take()
            if chain not in self.t.table.chains:
                self.fail(f"{word} to a chain the table does not have ({chain})")
            return self.t.jumper(word, chain)
        return self.t.simple_verdict(word)

    def values(self) -> set[Value]:
        """One literal, or an anonymous set ``{ a, b }``."""
        if self.peek() != "{":
            return {self.literal(self.take())}
        self.take("{")
        out: set[Value] = set()
        while self.peek() != "}":
            out.add(self.literal(self.take()))
            if self.peek() == ",":
                self.take()
        self.take("}")
        return out

    def literal(self, tok: str) -> Value:
        if tok.startswith("@") or tok in ("{", "}", ","):
            self.fail(f"not a literal: {tok}")
        return int(tok, 0) if re.fullmatch(r"\d+|0x[0-9a-f]+", tok) else tok

    # relations: <concatenation> ( vmap @m | [!=] @set | [!=] literal(s) )
    def relation(self) -> Stmt:
        exprs = self.concat()
        tok = self.peek()
        if tok == "vmap":
            self.take()
            name = self.set_ref(want_map=True)
            return self.t.vmap(exprs, name)
        negate = False
        if tok == "!=":
            self.take()
            negate = True
        if self.peek() is not None and self.peek().startswith("@"):  # type: ignore[union-attr]
            name = self.set_ref(want_map=False)
            return self.t.member(exprs, name, negate)
        if len(exprs) == 1 and self.kinds[-1] in ("saddr", "daddr"):  # an address or a prefix
            tok = self.take()
            try:
                net = ip_network(tok, strict=False)
            except ValueError:
                self.fail(f"not an address or a prefix: {tok}")
            addr = exprs[0]

            def inside(s: _State) -> None:
                a = _addr(str(addr(s)))
                if (a is not None and a.version == net.version and a in net) == negate:
                    raise _NoMatch

            return inside
        if len(exprs) != 1 or self.kinds[-1] != "l4proto":
            self.fail("only meta l4proto and addresses are compared with literals here")
        return self.test(exprs[0], self.values(), negate)

    def test(self, expr: Expr, want: set[Value], negate: bool) -> Stmt:
        def check(s: _State) -> None:
            if (expr(s) in want) == negate:
                raise _NoMatch

        return check

    def set_ref(self, want_map: bool) -> str:
        tok = self.take()
        if not tok.startswith("@"):
            self.fail("expected @set")
        name = tok[1:]
        st = self.t.table.sets.get(name)
        if st is None:
            self.fail(f"a set the table does not declare: {name}")
        if st.is_map != want_map:
            self.fail(f"{name} is {'not ' if want_map else ''}a map")
        return name

    def concat(self) -> list[Expr]:
        self.kinds: list[str] = []  # the selectors' names, in order (ours: what may be compared how)
        out = [self.selector()]
        while self.peek() == ".":
            self.take()
            out.append(self.selector())
        return out

    def selector(self) -> Expr:
        tok = self.take()
        self.kinds.append(self.peek() or "" if tok in ("ip", "ip6", "meta") else tok)
        fam = self.t.family.value
        if tok in ("ip", "ip6"):
            if tok != fam:
                self.fail(f"{tok} in an {fam} table")
            which = self.take("saddr", "daddr")
            return (lambda s: s.saddr) if which == "saddr" else (lambda s: s.daddr)
        if tok == "meta":
            key = self.take("l4proto", "mark")
            return (lambda s: s.packet.proto) if key == "l4proto" else (lambda s: s.mark)
        if tok == "th" or tok in PROTOCOLS:
            self.take("dport")
            if tok == "th":
                return lambda s: s.dport
            proto = tok

            def dport(s: _State) -> Value:
                if s.packet.proto != proto:
                    raise _NoMatch
                return s.dport

            return dport
        if tok == "ct":
            self.take("original")
            if self.peek() == "proto-dst":
                self.take()
                return lambda s: s.orig_dport
            if self.take() != fam:
                self.fail("ct original of another family")
            self.take("daddr")
            return lambda s: s.orig_daddr
        if tok == "numgen":
            self.take("random", "inc")  # inc: a counter; which slot comes next is not ours to know
            self.take("mod")
            n = int(self.take())
            return lambda s: s.choose(n)
        if tok == "jhash":
            if self.take() != fam:
                self.fail("jhash of another family")
            self.take("saddr")
            self.take("mod")
            n = int(self.take())
            self.take("seed")
            self.take()
            return lambda s: s.choose(n)  # every slot the hash may give (the kernel's jhash is not modelled)
        self.fail(f"unknown expression {tok!r}")

    # statements with effects
    def mark_set(self) -> Stmt:
        self.i += 3
        self.take("meta")
        self.take("mark")
        op = self.take("|", "^")
        bits = int(self.take(), 0)

        def set_mark(s: _State) -> None:
            s.mark = s.mark | bits if op == "|" else s.mark ^ bits

        return set_mark

    def dnat(self) -> Stmt:
        self.take("dnat")
        if self.take() != self.t.family.value:
            self.fail("dnat of another family")
        self.take("to")
        key = self.concat()
        self.take("map")
        name = self.set_ref(want_map=True)
        if self.peek() != ":":
            return self.t.dnat(key, name)
        # `dnat ip6 to K map @addresses : K map @ports` (IPv6 affinity: two records, see names.py)
        self.take(":")
        port_key = self.concat()
        self.take("map")
        port_map = self.set_ref(want_map=True)
        return self.t.dnat_split(key, name, port_key, port_map)

    def update(self) -> Stmt:
        self.take("update")
        name = self.set_ref(want_map=True)
        if not self.t.table.sets[name].dynamic:
            self.fail(f"update of a map the table does not mark dynamic: {name}")
        self.take("{")
        key = self.concat()
        if self.peek() == "timeout":  # else the map's own timeout
            self.take("timeout")
            timeout = self.take()
            if not re.fullmatch(r"\d+s", timeout):
                self.fail(f"timeout {timeout}")
        self.take(":")
        data = self.concat()
        self.take("}")
        return self.t.updater(name, key, data)


# -- the tracer -----------------------------------------------------------------------------


def _addr(text: str) -> IPv4Address | IPv6Address | None:
    try:
        return ip_address(text)
    except ValueError:
        return None


def _component_matches(element: str, value: Value, interval: bool) -> bool:
    if isinstance(value, int):
        return element == str(value)
    if element == value:
        return True
    a = _addr(value)
    if a is None:
        return False
    if interval and "/" in element:
        return a in ip_network(element, strict=False)
    if interval and "-" in element:
        first, last = (_addr(x) for x in element.split("-", 1))
        if first is None or last is None or first.version != a.version:
            return False
        return int(first) <= int(a) <= int(last)
    return a == _addr(element)


class Tracer:
    """Traces packets through ``table`` (one family's compiled Table). ``local``: the node's own
    addresses (``fib … type local``); a packet's ``src`` on the node means "sent by the node"
    only with ``Packet(local=True)``."""

    def __init__(self, table: Table, local: Iterable[str]) -> None:
        self.table = table
        self.family = table.family
        self.local = {a for a in (_addr(x) for x in local) if a is not None}
        self.affinity: dict[str, dict[Key, tuple[str, ...]]] = {}  # per dynamic map: what `update` recorded
        self.chains: dict[str, list[tuple[str, list[Stmt]]]] = {}
        for name, chain in table.chains.items():
            self.chains[name] = [(rule, _Parser(self, rule).rule()) for rule in chain.rules]
        self.base = sorted(
            (c for c in table.chains.values() if c.hook is not None),
            key=lambda c: (c.hook.priority if c.hook else 0, c.name),
        )
        for c in self.base:
            assert c.hook is not None
            if c.hook.hook not in HOOK_ORDER or c.hook.type not in ("filter", "nat"):
                raise Unsupported(f"base chain {c.name}: {c.hook}")
        for set_name, els in table.elements.items():  # every verdict a map holds must parse too
            st = table.sets[set_name]
            if st.spec.endswith(": verdict"):
                for el in els.values():
                    self.verdict_of(el.value or ())

    def is_local(self, addr: str) -> bool:
        """One of the node's addresses, or loopback (every node has it)."""
        a = _addr(addr)
        return a is not None and (a in self.local or a.is_loopback)

    # building blocks the parser closes over
    def simple_verdict(self, word: str) -> Stmt:
        def verdict(s: _State) -> None:
            if word == "return":
                raise _Return
            raise _Verdict(word)

        return verdict

    def jumper(self, word: str, chain: str) -> Stmt:
        def jump(s: _State) -> None:
            self.run_chain(chain, s)  # a terminal verdict propagates as an exception
            if word == "goto":
                raise _Return  # back to the chain that jumped to ours

        return jump

    def verdict_of(self, value: Sequence[str]) -> Stmt:
        if len(value) != 1:
            raise Unsupported(f"a verdict map value {value!r}")
        p = _Parser(self, value[0])
        stmt = p.verdict()
        if p.peek() is not None:
            p.fail("more than a verdict")
        return stmt

    def lookup(self, name: str, key: list[Value]) -> tuple[str, ...] | None:
        """The element of set/map ``name`` whose key matches; its value (() for a set), or None."""
        st: Set = self.table.sets[name]
        interval = "interval" in st.flags
        if st.dynamic:
            for k, v in self.affinity.get(name, {}).items():
                if len(k) == len(key) and all(_component_matches(e, x, False) for e, x in zip(k, key, strict=True)):
                    return v
            return None
        for el in self.table.elements.get(name, {}).values():
            if len(el.key) != len(key):
                raise Unsupported(f"{name}: a key of {len(el.key)} parts looked up with {len(key)}")
            if all(_component_matches(e, x, interval) for e, x in zip(el.key, key, strict=True)):
                return el.value if el.value is not None else ()
        return None

    def vmap(self, exprs: list[Expr], name: str) -> Stmt:
        if not self.table.sets[name].spec.endswith(": verdict"):
            raise Unsupported(f"vmap of {name}, not a verdict map")

        def vmap(s: _State) -> None:
            key = [e(s) for e in exprs]
            value = self.lookup(name, key)
            if value is None:
                raise _NoMatch
            s.path.append(f"  @{name} {' . '.join(map(str, key))} : {' '.join(value)}")
            self.verdict_of(value)(s)

        return vmap

    def member(self, exprs: list[Expr], name: str, negate: bool) -> Stmt:
        def member(s: _State) -> None:
            found = self.lookup(name, [e(s) for e in exprs]) is not None
            if found == negate:
                raise _NoMatch

        return member

    def dnat(self, exprs: list[Expr], name: str) -> Stmt:
        def dnat(s: _State) -> None:
            if s.hook not in ("prerouting", "output"):
                raise Unsupported(f"dnat in {s.hook}")
            value = self.lookup(name, [e(s) for e in exprs])
            if value is None:
                raise _NoMatch  # a map miss: the rule does not apply, the next one runs
            if len(value) != 2:
                raise Unsupported(f"a DNAT target {value!r} in {name}")
            s.dnat = (value[0], int(value[1]))
            raise _Verdict("accept")

        return dnat

    def dnat_split(self, key: list[Expr], name: str, port_key: list[Expr], port_map: str) -> Stmt:
        def dnat(s: _State) -> None:
            if s.hook not in ("prerouting", "output"):
                raise Unsupported(f"dnat in {s.hook}")
            address = self.lookup(name, [e(s) for e in key])
            port = self.lookup(port_map, [e(s) for e in port_key])
            if address is None or port is None:
                raise _NoMatch  # a map miss: the rule does not apply, the next one runs
            if len(address) != 1 or len(port) != 1:
                raise Unsupported(f"a DNAT target {address!r} : {port!r} in {name}, {port_map}")
            s.dnat = (address[0], int(port[0]))
            raise _Verdict("accept")

        return dnat

    def updater(self, name: str, key: list[Expr], data: list[Expr]) -> Stmt:
        def update(s: _State) -> None:
            self.affinity.setdefault(name, {})[tuple(str(e(s)) for e in key)] = tuple(str(e(s)) for e in data)

        return update

    # the walk
    def run_chain(self, name: str, s: _State) -> None:
        """Runs chain ``name``: returns if it falls off its end or returns, raises _Verdict."""
        try:
            for text, stmts in self.chains[name]:
                at = len(s.path)  # the rule goes before what its jump or lookup added
                try:
                    for stmt in stmts:
                        stmt(s)
                except _NoMatch:
                    del s.path[at:]
                    continue
                except (_Verdict, _Return):
                    s.path.insert(at, f"{name}: {text}")
                    raise
                s.path.insert(at, f"{name}: {text}")
        except _Return:
            pass

    def run_hook(self, hook: str, s: _State, types: tuple[str, ...] = ("filter", "nat")) -> str:
        """The base chains of ``hook`` by priority: "accept" (each accepted), or drop / reject."""
        s.hook = hook
        for chain in self.base:
            assert chain.hook is not None
            if chain.hook.hook != hook or chain.hook.type not in types:
                continue
            was = s.dnat
            try:
                self.run_chain(chain.name, s)
            except _Verdict as v:
                s.path.append(f"{chain.name}: {v.verdict}")
                if v.verdict != "accept":
                    return v.verdict
            if s.dnat != was:  # the NAT takes effect when the nat chain is done
                assert s.dnat is not None
                s.daddr, s.dport = s.dnat
        return "accept"

    def _once(self, packet: Packet, choose: Callable[[int], int]) -> Outcome:
        if packet.proto not in PROTOCOLS:
            raise Unsupported(f"protocol {packet.proto}")
        s = _State(packet, packet.src, packet.dst, packet.port, packet.dst, packet.port, choose)

        def done(verdict: str, delivered: str | None = None) -> Outcome:
            return Outcome(verdict, s.dnat, s.masqueraded, delivered, tuple(s.path))

        hooks = ("output",) if packet.local else ("prerouting",)
        for hook in hooks:
            if (v := self.run_hook(hook, s)) != "accept":
                return done(v)
        if packet.local:
            if (v := self.run_hook("postrouting", s)) != "accept":
                return done(v)
            if not self.is_local(s.daddr):
                return done("accept", "forward")
            for hook in ("prerouting", "input"):  # back in through lo: NAT is set up already
                if (v := self.run_hook(hook, s, ("filter",))) != "accept":
                    return done(v)
            return done("accept", "local")
        if self.is_local(s.daddr):
            v = self.run_hook("input", s)
            return done(v, "local" if v == "accept" else None)
        for hook in ("forward", "postrouting"):
            if (v := self.run_hook(hook, s)) != "accept":
                return done(v)
        return done("accept", "forward")

    def trace(self, packet: Packet, record: bool = False) -> Trace:
        """Every outcome of ``packet`` (each slot of each numgen/jhash followed). ``record``:
        keep what ``update @affinity`` wrote (as the kernel would, for the next packet)."""
        before = {name: dict(records) for name, records in self.affinity.items()}
        outcomes: list[Outcome] = []
        recorded: dict[str, dict[Key, tuple[str, ...]]] = {}
        pending: list[list[int]] = [[]]
        while pending:
            prefix = pending.pop()
            taken: list[int] = []
            arity: list[int] = []

            def choose(n: int, prefix: list[int] = prefix, taken: list[int] = taken, arity: list[int] = arity) -> int:
                pick = prefix[len(taken)] if len(taken) < len(prefix) else 0
                taken.append(pick)
                arity.append(n)
                return pick

            self.affinity = {name: dict(records) for name, records in before.items()}
            outcomes.append(self._once(packet, choose))
            for name, records in self.affinity.items():
                recorded.setdefault(name, {}).update(records)
            for depth in range(len(prefix), len(taken)):
                pending += [[*taken[:depth], alt] for alt in range(1, arity[depth])]
        self.affinity = recorded if record else before
        return Trace(packet, tuple(outcomes))


def tracers(tables: Iterable[Table], local: Iterable[str]) -> dict[Family, Tracer]:
    """One tracer per family of a compile (``compile_tables(...).tables``)."""
    local = list(local)
    return {t.family: Tracer(t, local) for t in tables}
