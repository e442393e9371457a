"""C2SP signed notes, checkpoints and cosignatures, held to other implementations' vectors.

The Ed25519 vectors are golang.org/x/mod/sumdb/note's (``PeterNeumann``) and
the signed-note spec's own example (``example.com/foo``): a verifier key
``<name>+<hex key id>+base64(0x01 ‖ public key)`` and notes signed by it.
"""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palyra.journal.format.signing import Signer
from palyra.journal.tlog.note import (
    COSIGNATURE_TYPE,
    NoteError,
    Witness,
    add_cosignatures,
    checkpoint_body,
    cosignature_line,
    cosignature_message,
    key_id,
    parse_checkpoint,
    parse_note,
    parse_witness,
    sign_checkpoint,
    strict_b64decode,
    verify_checkpoint,
)
from palyra.journal.tlog.signing import next_checkpoint

GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_NOTE = ("If you think cryptography is the answer to your problem,\n"
           "then you don't know what your problem is.\n\n"
           "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXg"
           "KvqfqdngotpRZb6KE6RyyBwJnAM=\n").encode()  # fmt: skip
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = ("This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1"
             "YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n").encode()  # fmt: skip


def _vkey(vkey: str) -> tuple[str, bytes, bytes]:
    name, hash_hex, b64 = vkey.split("+", 2)
    raw = base64.b64decode(b64)
    assert raw[0] == 1  # Ed25519
    return name, bytes.fromhex(hash_hex), raw[1:]


@pytest.mark.parametrize(("vkey", "note"), [(GO_VKEY, GO_NOTE), (SPEC_VKEY, SPEC_NOTE)])
def test_key_ids_and_signatures_of_other_implementations(vkey: str, note: bytes) -> None:
    name, want_id, public_key = _vkey(vkey)
    assert key_id(name, public_key) == want_id
    parsed = parse_note(note)
    [sig] = parsed.signatures
    assert (sig.name, sig.key_id) == (name, want_id) and parsed.text() == note
    from palyra.journal.format.signing import signature_valid

    assert signature_valid(public_key, parsed.body, sig.signature)


def test_our_signature_of_the_go_note_is_the_go_signature() -> None:
    seed = base64.b64decode(GO_SKEY.split("+", 4)[4])[1:]
    signer = Signer(Ed25519PrivateKey.from_private_bytes(seed))
    parsed = parse_note(GO_NOTE)
    name, want_id, public_key = _vkey(GO_VKEY)
    assert signer.public_key == public_key
    assert parsed.body + b"\n" + _line(name, want_id, signer.sign(parsed.body)) == GO_NOTE


def _line(name: str, kid: bytes, sig: bytes) -> bytes:
    return f"\u2014 {name} {base64.b64encode(kid + sig).decode()}\n".encode()


def test_a_checkpoint_round_trips_and_any_change_is_refused() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    root = bytes(range(32))
    note = sign_checkpoint("example.org/log", 7, root, signer.public_key, signer.sign)
    _note, checkpoint = verify_checkpoint(note, "example.org/log", signer.public_key)
    assert (checkpoint.origin, checkpoint.size, checkpoint.root) == ("example.org/log", 7, root)
    assert note.startswith(checkpoint_body("example.org/log", 7, root) + "\n\u2014 ".encode())
    for bad in (note.replace(b"\n7\n", b"\n8\n"), note.replace(b"example.org/log\n", b"ex.org/log\n", 1)):
        with pytest.raises(NoteError):
            verify_checkpoint(bad, None, signer.public_key)
    with pytest.raises(NoteError):
        verify_checkpoint(note, "another/origin", signer.public_key)
    with pytest.raises(NoteError):
        verify_checkpoint(note, None, Signer(Ed25519PrivateKey.generate()).public_key)
    for malformed in (b"a\n07\nAAAA\n\n", b"no blank line\n", b"x\n1\n" + b"A" * 44 + b"\n"):
        with pytest.raises(NoteError):
            parse_checkpoint(parse_note(malformed).body)


def test_only_the_canonical_base64_of_a_hash_or_signature_is_valid() -> None:
    # A final base64 character carries unused low bits that Python's decoder ignores:
    # "...B=" and "...A=" can decode to the same 32 bytes. One hash must have one text.
    root = bytes(range(32))
    text = base64.b64encode(root).decode()
    assert strict_b64decode(text, "root") == root
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".index(text[-2])
    sloppy = text[:-2] + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[last | 1] + "="
    assert sloppy != text and base64.b64decode(sloppy) == root
    with pytest.raises(NoteError, match="canonical"):
        strict_b64decode(sloppy, "root")
    signer = Signer(Ed25519PrivateKey.generate())
    note = sign_checkpoint("example.org/log", 7, root, signer.public_key, signer.sign)
    sig_line = note.rstrip(b"\n").rsplit(b"\n", 1)[1]
    sig_b64 = sig_line.rsplit(b" ", 1)[1]
    raw = base64.b64decode(sig_b64)
    # key id and signature, 68 bytes: the last character before "=" has two unused bits
    cut = len(sig_b64.rstrip(b"=")) - 1
    spelled = {base64.b64encode(raw)}
    for alt in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/":
        candidate = sig_b64[:cut] + alt.encode() + sig_b64[cut + 1 :]
        if candidate not in spelled and base64.b64decode(candidate) == raw:
            with pytest.raises(NoteError, match="canonical"):
                verify_checkpoint(note.replace(sig_b64, candidate), None, signer.public_key)
            spelled.add(candidate)
    assert len(spelled) > 1  # at least one other spelling existed and was refused


def test_witness_cosignatures_are_verified_stored_and_replaced() -> None:
    log = Signer(Ed25519PrivateKey.generate())
    note = sign_checkpoint("example.org/log", 3, bytes(32), log.public_key, log.sign)
    body = parse_note(note).body
    w_key = Ed25519PrivateKey.generate()
    witness = Witness("witness.example/w1", Signer(w_key).public_key)
    assert parse_witness(f"witness.example/w1={witness.public_key.hex()}") == witness
    cosig = cosignature_line(witness, 1_700_000_000, w_key.sign(cosignature_message(body, 1_700_000_000)))
    offered = note + cosig
    stored, added = add_cosignatures(note, offered, [witness])
    assert added == ["witness.example/w1"] and stored == offered
    raw = base64.b64decode(cosig.split(b" ")[-1])
    assert raw[:4] == key_id(witness.name, witness.public_key, COSIGNATURE_TYPE)
    # A newer cosignature by the same witness replaces the older one.
    newer = cosignature_line(witness, 1_700_000_100, w_key.sign(cosignature_message(body, 1_700_000_100)))
    again, _ = add_cosignatures(stored, note + newer, [witness])
    assert again == note + newer
    # Refused: an unknown witness, a bad signature, another checkpoint.
    stranger = Witness("witness.example/w2", Signer(Ed25519PrivateKey.generate()).public_key)
    with pytest.raises(NoteError):
        add_cosignatures(note, offered, [stranger])
    forged = cosignature_line(witness, 1_700_000_000, w_key.sign(b"something else"))
    with pytest.raises(NoteError):
        add_cosignatures(note, note + forged, [witness])
    other = sign_checkpoint("example.org/log", 4, bytes(32), log.public_key, log.sign)
    with pytest.raises(NoteError):
        add_cosignatures(note, other + cosig, [witness])


def test_the_log_never_signs_a_smaller_or_different_tree() -> None:
    """``next_checkpoint`` over in-memory trees: what the writer calls before signing."""
    from palyra.core.errors import PalyraError
    from palyra.journal.tlog.merkle import Frontier, MemoryTree, extend, leaf_hash

    signer = Signer(Ed25519PrivateKey.generate())
    entries = [(bytes([i]) * 32, i) for i in range(10)]
    trees = {n: extend(Frontier(), entries[:n], b"")[0] for n in (4, 6, 10)}
    memory = MemoryTree([leaf_hash(e) for e, _ in entries])
    first = next_checkpoint(None, trees[6], memory.hash_at, "o/log", signer.public_key, signer.sign)
    assert first is not None
    assert next_checkpoint(first, trees[6], memory.hash_at, "o/log", signer.public_key,
                           signer.sign) is None  # fmt: skip
    later = next_checkpoint(first, trees[10], memory.hash_at, "o/log", signer.public_key, signer.sign)
    assert later is not None and parse_checkpoint(parse_note(later).body).size == 10
    with pytest.raises(PalyraError):  # smaller
        next_checkpoint(later, trees[4], memory.hash_at, "o/log", signer.public_key, signer.sign)
    forked = [*entries[:5], (b"\xff" * 32, 5), *entries[6:]]  # entry 5 rewritten
    fork_memory = MemoryTree([leaf_hash(e) for e, _ in forked])
    fork_tree = extend(Frontier(), forked, b"")[0]
    with pytest.raises(PalyraError):  # larger, but not an extension of the signed 6
        next_checkpoint(first, fork_tree, fork_memory.hash_at, "o/log", signer.public_key,
                        signer.sign)  # fmt: skip
    with pytest.raises(PalyraError):  # the stored rows disagree with the frontier
        next_checkpoint(first, trees[10], fork_memory.hash_at, "o/log", signer.public_key,
                        signer.sign)  # fmt: skip
    with pytest.raises(PalyraError):  # ... even for the first checkpoint, with nothing to extend
        next_checkpoint(None, trees[10], fork_memory.hash_at, "o/log", signer.public_key,
                        signer.sign)  # fmt: skip


@pytest.mark.parametrize("size", [1, 2, 255, 1_000, 70_000])
def test_a_proof_is_as_large_as_format_md_says(size: int) -> None:
    """docs/journal/format.md "Size": the header, ``index``, 45 bytes a hash, the empty
    line and a checkpoint of ``2·|origin| + digits(size) + 146`` bytes (default origin)."""
    from palyra.journal.tlog.merkle import MemoryTree, inclusion_proof, leaf_hash, root_at
    from palyra.journal.tlog.note import default_origin
    from palyra.journal.tlog.proof import encode_proof

    signer = Signer(Ed25519PrivateKey.generate())
    origin = default_origin(signer.public_key)
    tree = MemoryTree(leaf_hash(i.to_bytes(32, "big")) for i in range(size))
    note = sign_checkpoint(origin, size, root_at(size, tree.hash_at), signer.public_key,
                           signer.sign)  # fmt: skip
    assert len(note) == 2 * len(origin) + len(str(size)) + 146
    for index in {0, size // 2, size - 1}:
        path = inclusion_proof(index, size, tree.hash_at)
        proof = encode_proof(b"", index, path, note)
        without_record = len(proof) - len(b"extra \n")
        assert without_record == 23 + len(f"index {index}\n") + 45 * len(path) + 1 + len(note)
        assert len(path) <= (size - 1).bit_length()  # ⌈log₂ n⌉
