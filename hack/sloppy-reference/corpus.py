"""The texts the reference is asked about (main.go): address and CIDR spellings found in stored
Kubernetes objects, their near misses, and seeded random ones. Prints a JSON list of strings.

    python3 hack/sloppy-reference/corpus.py | (cd hack/sloppy-reference && go run .) \
        > tests/golden/sloppy-reference.json
"""

from __future__ import annotations

import json
import random

IPS = [
    "1.2.3.4",
    "0.0.0.0",
    "255.255.255.255",
    "010.001.002.003",
    "01.2.3.4",
    "1.02.3.004",
    "00000000000000000001.2.3.4",
    "0000000000000000000000000000000000255.1.1.1",
    "256.1.1.1",
    "1.2.3",
    "1.2.3.4.5",
    " 1.2.3.4",
    "1.2.3.4 ",
    "1.2.3.4\n",
    "\t1.2.3.4",
    "0x1.2.3.4",
    "1..2.3",
    "1.2.3.",
    ".1.2.3",
    "99999999.1.1.1",
    "16777215.1.1.1",
    "1.2.3.4:80",
    "1.2.3.4/32",
    "::ffff:1.2.3.4",
    "::FFFF:1.2.3.4",
    "::ffff:102:304",
    "0:0:0:0:0:ffff:1.2.3.4",
    "0:0:0:0:0:ffff:102:304",
    "::ffff:001.002.003.004",
    "::ffff:0.0.0.0",
    "::ffff:ffff:ffff",
    "::1.2.3.4",
    "::0.0.0.1",
    "::ffff:1.2.3",
    "::ffff:1.2.3.4.5",
    "::ffff:256.1.1.1",
    "::ffff:1.2.3.4:5",
    "1.2.3.4::",
    "::fffe:1.2.3.4",
    "0::ffff:1.2.3.4",
    "::ffff:0:1.2.3.4",
    "64:ff9b::1.2.3.4",
    "::",
    "::1",
    "fd00::1",
    "FD00:0:0::1",
    "fd00:0000:0000:0000:0000:0000:0000:0001",
    "00fd00::1",
    "0000000000fd00::1",
    "1fd00::1",
    "fffff::1",
    "fe80::1%eth0",
    "fe80::1%",
    "1::2::3",
    "1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7:8::",
    "::1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7::",
    "::1:2:3:4:5:6:7",
    "1:2:3:4:5:6:1.2.3.4",
    "1:2:3:4:5:1.2.3.4",
    "1:2:3:4:5:6:7:1.2.3.4",
    "1::1.2.3.4",
    "1::1.2.3.4:1",
    "",
    ":",
    "::::",
    ":::",
    "1:",
    ":1",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4:5:6:7",
    "[::1]",
    "::1 ",
    " ::1",
    "\uff11.\uff12.\uff13.\uff14",
    "1.2.3.\uff14",
    "\x00",
    "1.2.3.4\x00",
    "\u0661.2.3.4",
    "::g",
    "g::",
    "10.96.0",
    "localhost",
    "None",
    "2001:db8:0:0:1:0:0:1",
    "2001:db8::1:0:0:1",
    "2001:0:0:1::1",
    "0:0:1::",
    "1:0:0:2:0:0:0:3",
]
CIDRS = [
    "10.0.0.0/8",
    "10.0.0.1/8",
    "010.0.0.0/8",
    "10.0.0.0/08",
    "10.0.0.0/008",
    "10.0.0.0/0000000000008",
    "10.0.0.0/33",
    "10.0.0.0/32",
    "10.0.0.0/-1",
    "10.0.0.0/",
    "/8",
    "10.0.0.0/8/8",
    "10.0.0.0/ 8",
    "10.0.0.0 /8",
    " 10.0.0.0/8",
    "10.0.0.0/8 ",
    "10.0.0.0/+8",
    "10.0.0.0/8\n",
    "10.0.0.0/0x8",
    "0.0.0.0/0",
    "1.2.3.4/0",
    "::/0",
    "::1/0",
    "0.0.0.0/00",
    "::ffff:10.0.0.0/104",
    "::ffff:10.0.0.1/104",
    "::ffff:0.0.0.0/96",
    "::ffff:1.2.3.4/128",
    "::ffff:1.2.3.4/97",
    "::ffff:1.2.3.4/96",
    "::ffff:1.2.3.4/95",
    "::ffff:1.2.3.4/81",
    "::ffff:1.2.3.4/80",
    "::ffff:1.2.3.4/64",
    "::ffff:1.2.3.4/129",
    "::ffff:102:304/120",
    "::1.2.3.4/120",
    "2001:db8::1/64",
    "2001:db8::/129",
    "2001:db8::/128",
    "fd00::/8",
    "00fd00::/16",
    "FD00::/8",
    "fd00::1%eth0/64",
    "10.0.0.0/255.0.0.0",
    "10.0.0.0/0.255.255.255",
    "1.2.3.4/32",
    "::1/128",
    "198.18.0.100/32",
    "198.018.000.100/032",
    "::ffff:198.18.0.101/128",
    "198.18.0.101/24",
    "198.18.0.101/31",
    "10.96.0.0/12",
    "10.96.0.0/12 ",
    "fd00:10:96::/112",
    "fd00:10:96::1/112",
    "2000::/12",
    "32.0.0.0/3",
    "1.2.3/24",
    "[::1]/128",
    "\uff11\uff10.0.0.0/8",
    "10.0.0.0/\uff18",
    # padding: Go's TrimSpace (kube-proxy trims source ranges) is not str.strip()
    "\u00a010.0.0.0/8\u2003",
    "\x1c10.0.0.0/8",
    "10.0.0.0/8\x1f",
    "\x8510.0.0.0/8\u3000",
    "\u200b10.0.0.0/8",
    "\v 10.0.0.0/8 \f",
]


def _mutations(rng: random.Random) -> str:
    v4 = ".".join(str(rng.randrange(256)) for _ in range(4))
    v6 = ":".join(f"{rng.randrange(65536):x}" for _ in range(8))
    base = rng.choice(
        [
            v4,
            v6,
            f"::ffff:{v4}",
            f"{v4}/{rng.randrange(40)}",
            f"{v6}/{rng.randrange(140)}",
            f"::ffff:{v4}/{rng.randrange(90, 130)}",
            "::",
            "fd00::1",
            "::ffff:0:0/96",
        ]
    )
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(base) + 1)
        op = rng.randrange(6)
        if op == 0:
            base = base[:i] + "0" * rng.randrange(1, 4) + base[i:]  # leading zeros
        elif op == 1:
            base = base[:i] + rng.choice("0123456789abcdefABCDEF.:/ %x-") + base[i:]
        elif op == 2 and i < len(base):
            base = base[:i] + base[i + 1 :]
        elif op == 3:
            base = base.replace(":0:", "::", 1)
        elif op == 4 and "." in base:
            base = base.replace(".", ".0", 1)
    return base


def corpus() -> list[str]:
    rng = random.Random(20260)
    out = IPS + CIDRS
    out += [_mutations(rng) for _ in range(1200)]
    alphabet = "0123456789abcdefABCDEF.:/%"
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 16))) for _ in range(300)]
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    print(json.dumps(corpus()))
