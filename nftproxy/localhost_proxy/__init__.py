"""The localhost NodePort proxy: kube-proxy v1.37's localnodeportproxy in userspace, done better.

nftables cannot DNAT traffic to loopback, so with ``--nodeport-addresses`` naming a loopback CIDR
(``localhost`` = 127.0.0.0/8 and ::1/128) kube-proxy v1.37 (gate KubeProxyNFTablesLocalhostNodePorts)
serves each TCP NodePort on 127.0.0.1 and ::1 with a userspace proxy; UDP and SCTP are rejected
and counted in the table (compiler/skeleton.py). This is that proxy, in nftproxy's event loop,
updated after every successful sync with what the compiler chose (``Dataplane.localhost_nodeports``):

* one listener per TCP NodePort on the loopback address of each family with localhost NodePorts
  that the Service has (``--netns``: bound inside that namespace, as the health-check servers);
* the endpoints are the table's: ``externalTrafficPolicy: Local`` → this node's only, as upstream;
  none → no listener, so a client is refused (as upstream);
* an endpoint is picked by the Service's algorithm (``nftproxy.io/load-balancing``, else
  ``--load-balancing``), where upstream always picks at random: random; round-robin (a turn per
  listener); source-hash (a CRC-32 of the client address: the table's ``jhash`` never sees
  loopback, so there is no kernel choice to agree with; on 127.0.0.1 every client is one address,
  so all go to one endpoint while the list is unchanged); maglev (the same CRC-32 into the
  Service's Maglev table, compiler/maglev.py). ``sessionAffinity: ClientIP``: a
  client address keeps the endpoint that last served it while it reconnects within the timeout
  (a sliding window, as the table's ``update @affinity`` and upstream's pin);
* **beyond upstream**: a connect to the chosen endpoint that fails (refused, unreachable, or no
  answer within ``connect_timeout``, 1 s; upstream waits 5 s and then closes the client) is
  retried on the next endpoint in the algorithm's order, never the same one twice, up to
  ``attempts`` (3) endpoints; then the client is reset. Each retry and each client left unserved
  is counted; the affinity record follows the endpoint that answered;
* bytes are copied both ways with flow control, and half-closes are passed on (a client's
  ``shutdown(SHUT_WR)`` reaches the endpoint as a FIN and its answer still comes back); an error
  on one side resets the other;
* a listener that cannot be opened (the port taken on loopback) is logged and counted
  (``kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total``) and tried again at
  the next update; the other listeners serve;
* a listener whose NodePort goes away (or loses its endpoints) stops accepting; its established
  connections go on, as the kernel's established flows do after a rule change (upstream closes
  them). Only ``close`` (the process stopping) resets them.

The package, by job: ``picker`` (which endpoint: pure), ``sockets`` (sockets made inside the
namespace), ``relay`` (one proxied connection: bytes both ways), ``proxy`` (the listeners and
``LocalhostNodePorts``), ``metrics`` (the counters it updates, and the table's rejected packets).
What it serves is the compiler's choice (``nftproxy.compiler.localhost.LocalhostNodePort``). No
kopf, Kubernetes client or prometheus_client: the operator hands it its metrics.
"""

from nftproxy.localhost_proxy.metrics import localhost_rejections
from nftproxy.localhost_proxy.picker import Picker, client_hash
from nftproxy.localhost_proxy.proxy import LocalhostNodePorts, raise_fd_limit

__all__ = ["LocalhostNodePorts", "Picker", "client_hash", "localhost_rejections", "raise_fd_limit"]
