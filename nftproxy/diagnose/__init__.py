"""Readers of a table, ours or the kernel's: ``tableview`` (a read-only view), ``explain`` (one
Service's path in words), ``api_check`` (the kernel against the API's objects), ``verify`` (every
element against the desired tables) and ``trace`` (the next packets' verdict paths). They change
nothing in the kernel but ``trace``'s short-lived trace rules; no kopf, no Kubernetes client."""
