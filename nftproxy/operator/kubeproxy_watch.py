"""`nftproxy run` notices kube-proxy's rules on its node instead of silently competing with them.

At start and every ``--kube-proxy-check-period`` (env NFTPROXY_KUBE_PROXY_CHECK_PERIOD; default
30s, 0: never), the
node is checked for kube-proxy's tables/chains (:func:`nftproxy.migration.detect`). Found, they
are reported as the ProxyStatus condition ``KubeProxyDetected`` (reason ``KubeProxyRulesPresent``
at the first check, then ``KubeProxyActive`` if they changed since the previous check — kube-proxy
is still running and both proxies program the same Services — or ``KubeProxyLeftovers`` if not),
and as a Warning Event on the Node, once per reason, and by the metric
``nftproxy_kube_proxy_rules_detected`` (1 while found).
"""

from __future__ import annotations

import asyncio
import logging

from nftproxy.migration import Presence, detect
from nftproxy.operator import kube
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.kubeproxy")

CONDITION = "KubeProxyDetected"
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
        reason, what = "KubeProxyLeftovers", f"kube-proxy's rules are on this node and not changing ({where})"
    return {"type": CONDITION, "status": "True", "reason": reason, "message": f"{what}; {ADVICE}"}


class KubeProxyWatch:
    def __init__(self, netns: str | None, period: float) -> None:
        self.netns = netns
        self.period = period
        self.last: Presence | None = None
        self.posted: set[str] = set()

    async def run(self, syncer: Syncer, api: kube.Client, node: str) -> None:
        if self.period <= 0:
            return
        loop = asyncio.get_running_loop()
        first = True
        while True:
            try:
                now = await loop.run_in_executor(None, detect, self.netns)
            except Exception as e:  # a missing tool or a timeout: the proxy goes on
                log.warning("checking for kube-proxy's rules: %s", e)
                now = self.last
            cond = condition(now, self.last, first)
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


def post_node_event(api: kube.Client, node: str, reason: str, message: str) -> None:
    kube.post_event(api, node, "Node", "", node, reason, f"nftproxy on {node}: {message}")
