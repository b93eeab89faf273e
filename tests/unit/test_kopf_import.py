"""kopf is imported without the Kubernetes client, which stays importable for the kubeconfigs that
need its loader."""

import subprocess
import sys


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_operators_modules_load_kopf_without_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import nftproxy.operator.handlers, nftproxy.operator.restclient\n"
        "print('kopf' in sys.modules, 'kubernetes' in sys.modules, 'pydantic' in sys.modules)\n"
    )
    assert _run(code) == "True False False"


def test_the_kubernetes_client_is_still_importable_after_kopf() -> None:
    code = (
        "import nftproxy.operator.handlers\n"
        "from kubernetes.client import Configuration\n"
        "from kubernetes.config.kube_config import load_kube_config\n"
        "print(Configuration.__name__, callable(load_kube_config))\n"
    )
    assert _run(code) == "Configuration True"


def test_kopf_sees_the_client_when_it_was_imported_first() -> None:
    code = (
        "import kubernetes.client\n"
        "from nftproxy.operator.kopf_import import kopf\n"
        "from kopf._cogs.helpers import thirdparty\n"
        "print(thirdparty.V1ObjectMetaSync is kubernetes.client.V1ObjectMeta)\n"
    )
    assert _run(code) == "True"
