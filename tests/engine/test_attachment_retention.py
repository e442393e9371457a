"""Retention of attachment blobs on a real journal: a blob only pruned tapes named is
dropped with its references; one a retained tape, a live run or a young orphan names is
kept; the drop is one journal commit and survives a restart."""

from __future__ import annotations

import io
import time

from engine_harness import ADMIN, USER, Harness, run_to_end
from palyra_gen.palyra import v1 as pb
from PIL import Image

from palyra.core.images import sniff
from palyra.engine import AttachmentStore
from palyra.engine.model.attachments import ORPHAN_GRACE_MS, REF_PREFIX


def png(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (3, 2), (shade, 10, 10)).save(out, "PNG")
    return out.getvalue()


def with_image(text: str, data: bytes) -> pb.MessageInput:
    return pb.MessageInput(text=text, attachments=[pb.Attachment(name="a.png", data=data)])


async def test_retention_drops_only_what_no_retained_tape_names(harness: Harness) -> None:
    app = await harness.start()
    assert harness.engine is not None and harness.store is not None
    store, attachments = harness.store, harness.engine.attachments
    gone, shared, live, orphan = png(1), png(2), png(3), png(4)
    digest = {name: sniff(data).sha256 for name, data in
              (("gone", gone), ("shared", shared), ("live", live), ("orphan", orphan))}
    # Oldest first: two ended runs, then a run left open (retention stops at its first
    # record), then an ended run naming the same image as the second.
    first = await app.create_run(USER, pb.CreateRunRequest(input=with_image("a", gone),
                                                           complete=True, wait=True))
    second = await app.create_run(USER, pb.CreateRunRequest(input=with_image("b", shared),
                                                            complete=True, wait=True))
    await run_to_end(app, "x")  # (its records are pruned too)
    opened = await app.create_run(USER, pb.CreateRunRequest(input=with_image("c", live),
                                                            wait=True))
    fourth = await app.create_run(USER, pb.CreateRunRequest(input=with_image("d", shared),
                                                            complete=True, wait=True))
    # A blob stored for a run that never started (its input was refused afterwards).
    await attachments.put("user:alice", "01J0000000000000000000ORPH", [(digest["orphan"],
                                                                        orphan)])
    for run in (first, second, fourth):
        await app.complete_run(USER, pb.CompleteRunRequest(run_id=run.run.run_id, wait=True))
    for name in digest:
        assert attachments.get(digest[name]) is not None, name

    pruned = await app.prune_journal(ADMIN, pb.PruneJournalRequest(older_than_days=0))
    assert pruned.records > 0
    assert attachments.get(digest["gone"]) is None
    for name in ("shared", "live", "orphan"):
        assert attachments.get(digest[name]) is not None, name
    refs = [key for key, _v in store.scan_entities("meta", REF_PREFIX, "", 100)]
    assert not any(digest["gone"] in key for key in refs)
    assert sum(digest["shared"] in key for key in refs) == 1  # the pruned run's went
    # The drop is on the journal, one commit for the whole pass.
    [collected] = [e for e in store.read_range(pruned.pruned_through, 1000) if e.kind == "attachment.collected"]
    assert collected.payload["sha256"] == [digest["gone"]]

    # An orphan outlives its grace only.
    clock = time.time_ns() // 1_000_000 + ORPHAN_GRACE_MS + 1
    assert await AttachmentStore(store, lambda: clock).collect() == 1
    assert attachments.get(digest["orphan"]) is None
    # What was kept still serves a model call, and all of it survives a restart.
    app = await harness.restart()
    assert harness.engine is not None
    reused = await app.create_run(USER, pb.CreateRunRequest(input=with_image("look", shared),
                                                            complete=True, wait=True))
    done = await app.complete_run(USER, pb.CompleteRunRequest(run_id=reused.run.run_id,
                                                              wait=True))
    assert digest["shared"][:12] in done.run.final_text
    assert harness.engine.attachments.get(digest["gone"]) is None
    assert harness.engine.attachments.get(digest["live"]) is not None
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=opened.run.run_id))).run
    assert run.state == pb.RunState.IN_PROGRESS
