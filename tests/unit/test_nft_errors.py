"""nftables errors carry an errno, read once from nft's output (nft/located.py), and the fake
raises the errno the kernel would: callers ask ``is_not_found`` / ``is_exists``, never the text.
The real kernel's messages: tests/netns/test_kernel_sync.py."""

from __future__ import annotations

import errno

import pytest

from nftproxy.nft.backend import NftError, is_exists, is_not_found
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.located import error
from nftproxy.nft.objects import Chain, Element, Family, Set
from nftproxy.nft.transaction import Transaction

SCRIPT = (
    'add table ip t { comment "x"; }\n'
    'add element ip t s { 10.0.0.1 comment "File exists", 10.0.0.2 comment "a", 10.0.0.3 comment "b" }\n'
)


@pytest.mark.parametrize(
    ("output", "code"),
    [
        # as nft v1.0.6 words them (a network namespace of our own, by hand)
        ("Error: No such file or directory\nlist table ip nope\n              ^^^^\n", errno.ENOENT),
        ("/dev/stdin:1:22-28: Error: Could not process rule: No such file or directory\n", errno.ENOENT),
        ("Error: No such file or directory; did you mean table 't' in family ip?\nlist table ip x\n", errno.ENOENT),
        ("/dev/stdin:3:14-14: Error: Could not process rule: File exists\n", errno.EEXIST),
        ("Error: Could not process rule: Device or resource busy\ndelete set ip t s\n", errno.EBUSY),
        ("Error: Could not process rule: No buffer space available\n", errno.ENOBUFS),
        ("/dev/stdin:1:21-21: Error: syntax error, unexpected newline\nadd rule ip t c blah\n", errno.EINVAL),
        ("Error: Could not resolve hostname: Name or service not known\n", errno.EINVAL),
        ("", errno.EINVAL),
    ],
)
def test_an_nft_error_carries_the_errno_its_message_names(output: str, code: int) -> None:
    assert error(output).errno == code


def test_the_refused_statement_is_kept_and_never_read_for_the_errno() -> None:
    """A Service's name in an element comment is the user's text: "File exists" there is not
    nft's word, and the message points at the refused element alone."""
    e = error("/dev/stdin:2:54-61: Error: Could not process rule: No such file or directory\n", SCRIPT)
    assert (
        str(e)
        == 'Error: Could not process rule: No such file or directory [add element ip t s { 10.0.0.2 comment "a" }]'
    )
    assert is_not_found(e) and not is_exists(e)
    quoted = error('Error: syntax error, unexpected string\nadd element ip t s { 1 comment "File exists" }\n')
    assert quoted.errno == errno.EINVAL and "File exists" in str(quoted)


def _table() -> Transaction:
    tx = Transaction(Family.IP, "t")
    tx.add_table("c")
    tx.add_set(Set("s", "type ipv4_addr"))
    tx.add_set(Set("m", "type ipv4_addr : verdict"))
    tx.add_chain(Chain("c"))
    tx.add_rule("c", "ip daddr @s accept")
    return tx


def _one(build: str) -> NftError:
    fake = FakeBackend()
    fake.apply(_table())
    tx = Transaction(Family.IP, "t")
    if build == "element to a missing set":
        tx.add_elements("nope", [Element(("10.0.0.1",))])
    elif build == "deleting a missing element":
        tx.delete_elements("s", [("10.0.0.9",)])
    elif build == "a verdict to a missing chain":
        tx.add_elements("m", [Element(("10.0.0.1",), ("goto nope",))])
    elif build == "an element again with other data":
        tx.add_elements("m", [Element(("10.0.0.1",), ("goto c",)), Element(("10.0.0.1",), ("accept",))])
    elif build == "deleting a set a rule uses":
        tx.delete_set("s", is_map=False)
    with pytest.raises(NftError) as refused:
        fake.apply(tx)
    return refused.value


@pytest.mark.parametrize(
    ("build", "code"),
    [
        ("element to a missing set", errno.ENOENT),
        ("deleting a missing element", errno.ENOENT),
        ("a verdict to a missing chain", errno.ENOENT),
        ("an element again with other data", errno.EEXIST),
        ("deleting a set a rule uses", errno.EBUSY),
    ],
)
def test_the_fake_refuses_with_the_kernels_errno(build: str, code: int) -> None:
    assert _one(build).errno == code


def test_reading_what_is_not_there_is_not_an_error() -> None:
    fake = FakeBackend()
    assert fake.read(Family.IP, "nope") is None
    assert fake.delete(Family.IP, "nope") is False
    fake.apply(_table())
    with pytest.raises(NftError) as refused:
        fake.read_dynamic(Family.IP, "t", "nope")
    assert is_not_found(refused.value)
