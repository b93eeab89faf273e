"""`nftproxy run` notices kube-proxy's rules on its node instead of silently competing with them.

At start and every ``--kube-proxy-check-period`` (env NFTPROXY_KUBE_PROXY_CHECK_PERIOD; default
30s, 0: never), the
node is checked for kube-proxy's tables/chains (:func:`nftproxy.migration.detect`). Found, they
are reported as the ProxyStatus condition ``KubeProxyDetected`` (reason ``KubeProxyRulesPresent``
at the first check, then ``KubeProxyActive`` if they changed since the previous check — kube-proxy
is still running and both proxies program the same Services — or ``KubeProxyLeftovers`` if not),
and as a Warning Event on the Node, once per reason, and by the metric
``nftproxy_kube_proxy_rules_detected`` (1 while found).

With ``--cleanup-kube-proxy`` (env NFTPROXY_CLEANUP_KUBE_PROXY), a check that finds them
unchanged since the previous check (``KubeProxyLeftovers``: no kube-proxy runs here), after
nftproxy's own first successful sync, removes them as ``nftproxy cleanup --kube-proxy`` does
(:func:`nftproxy.migration.cleanup`); the condition turns False at that same check, and a Normal
Event on the Node (``KubeProxyLeftoversRemoved``) says what was removed. Never while they change
(``KubeProxyActive``), nor with ``--service-proxy-name`` (kube-proxy still serves the Services
that are not ours).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nftproxy.migration import Presence, Report, cleanup, detect
from nftproxy.operator import kube
from nftproxy.operator.leaving import Verdict
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.kubeproxy")

CONDITION = "KubeProxyDetected"
LEFTOVERS = "KubeProxyLeftovers"
REMOVED = "KubeProxyLeftoversRemoved"  # the Normal Event of --cleanup-kube-proxy
CLEANUP_FAILED = "KubeProxyCleanupFailed"  # its Warning Event when a part could not be removed
ADVICE = (
    "stop kube-proxy (or label the Services with service.kubernetes.io/service-proxy-name), "
    "then run `nftproxy cleanup --kube-proxy`"
)


def condition(now: Presence | None, before: Presence | None, first: bool) -> dict[str, str]:
    if now is None:
        return {
            "type": CONDITION,
            "status": "False",
            "reason": "NotFound",
            "message": "no kube-proxy rules on this node",
        }
    where = ", ".join(now.places)
    if first or before is None:
        reason, what = "KubeProxyRulesPresent", f"kube-proxy's rules are on this node ({where})"
    elif now.digest != before.digest:
        reason, what = "KubeProxyActive", f"kube-proxy is still programming this node ({where}): both proxies compete"
    else:
        reason, what = LEFTOVERS, f"kube-proxy's rules are on this node and not changing ({where})"
    return {"type": CONDITION, "status": "True", "reason": reason, "message": f"{what}; {ADVICE}"}


def removed_message(report: Report) -> str:
    return "nftproxy removed kube-proxy's leftover rules from this node (" + "; ".join(report.removed) + ")"


class KubeProxyWatch:
    def __init__(
        self,
        netns: str | None,
        period: float,
        cleanup: bool = False,
        service_proxy_name: str | None = None,
        leaving: Callable[[], Verdict] | None = None,
    ) -> None:
        """``leaving``: is this proxy leaving its node for good (``leaving.ask``)? Then kube-proxy's
        rules are never removed: they are those of the kube-proxy taking the node back."""
        self.netns = netns
        self.period = period
        self.cleanup = cleanup and not service_proxy_name  # kube-proxy serves the other Services then
        self.leaving = leaving
        self.last: Presence | None = None
        self.posted: set[str] = set()
        if cleanup and service_proxy_name:
            log.warning(
                "--cleanup-kube-proxy is ignored with --service-proxy-name %r: kube-proxy serves the other Services",
                service_proxy_name,
            )

    async def run(self, syncer: Syncer, api: kube.Client, node: str) -> None:
        if self.period <= 0:
            return
        loop = asyncio.get_running_loop()
        first = True
        while True:
            checked = True
            try:
                now = await loop.run_in_executor(None, detect, self.netns)
            except Exception as e:  # a missing tool or a timeout: the proxy goes on
                log.warning("checking for kube-proxy's rules: %s", e)
                now, checked = self.last, False
            cond = condition(now, self.last, first)
            # leftovers (unchanged since the previous check), and our own rules are in: remove them
            if (
                self.cleanup
                and checked
                and cond["reason"] == LEFTOVERS
                and syncer.first_sync.is_set()
                and await self.staying()
            ):
                report, now = await self.remove_leftovers(api, node)
                cond = condition(now, now, False)  # what could not be removed: still leftovers
                if now is None and report.removed:
                    cond = {**cond, "reason": REMOVED, "message": removed_message(report)}
            syncer.metrics.kube_proxy_rules.set(1 if cond["status"] == "True" else 0)
            self.last = now
            first = False
            if syncer.set_conditions([cond]):
                (log.warning if cond["status"] == "True" else log.info)("%s", cond["message"])
            if cond["status"] == "True" and cond["reason"] not in self.posted:
                try:
                    await loop.run_in_executor(None, post_node_event, api, node, cond["reason"], cond["message"])
                    self.posted.add(cond["reason"])
                except Exception as e:
                    log.warning("could not post the kube-proxy Event: %s", str(e).splitlines()[0] if str(e) else e)
            await asyncio.sleep(self.period)

    async def staying(self) -> bool:
        """Not leaving this node for good (no ``leaving`` check: staying). A node whose label was
        just removed gets kube-proxy back while this proxy stops: its fresh rules, unchanged for
        a check, must not be taken for leftovers."""
        if self.leaving is None:
            return True
        verdict = await asyncio.get_running_loop().run_in_executor(None, self.leaving)
        if verdict.leaving:
            log.info("kube-proxy's rules are left in place: this proxy is leaving the node (%s)", verdict.why)
        return not verdict.leaving

    async def remove_leftovers(self, api: kube.Client, node: str) -> tuple[Report, Presence | None]:
        """kube-proxy's leftovers removed (logged, an Event on the Node): what was done, and what
        is left after."""
        loop = asyncio.get_running_loop()
        try:
            report = await loop.run_in_executor(None, cleanup, self.netns)
        except Exception as e:
            report = Report(errors=[str(e)])
        if report.removed:
            log.info("%s", removed_message(report))
            await self._event(api, node, REMOVED, removed_message(report), "Normal")
        if report.errors:
            what = "could not remove all of kube-proxy's leftover rules: " + "; ".join(report.errors)
            log.warning("%s", what)
            await self._event(api, node, CLEANUP_FAILED, what, "Warning")
        try:
            return report, await loop.run_in_executor(None, detect, self.netns)
        except Exception as e:
            log.warning("checking for kube-proxy's rules: %s", e)
            return report, self.last

    async def _event(self, api: kube.Client, node: str, reason: str, message: str, event_type: str) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, post_node_event, api, node, reason, message, event_type
            )
        except Exception as e:
            log.warning("could not post the %s Event: %s", reason, str(e).splitlines()[0] if str(e) else e)


def post_node_event(api: kube.Client, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
    kube.post_event(api, node, "Node", "", node, reason, f"nftproxy on {node}: {message}", event_type)
