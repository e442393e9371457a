// The console's pure pieces under Node's test runner (`node --import tsx --test`):
// the SSE parser, the bounded tape window, the transcript fold.

import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { TapeEventSchema, type TapeEvent } from "../../generated/ts/palyra/v1/tape_pb.js";
import { SseParser } from "../src/sse";
import { TapeWindow, transcript } from "../src/tape";

test("SSE frames split anywhere, CRLF, comments, multi-line data, ids kept", () => {
  const text = ": keep-alive\r\nid: 7\r\nevent: tape\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 8\ndata: x\n\n";
  for (let cut = 0; cut <= text.length; cut++) {
    const parser = new SseParser();
    const frames = [...parser.push(text.slice(0, cut)), ...parser.push(text.slice(cut))];
    assert.deepEqual(frames, [
      { id: "7", event: "tape", data: "{\"a\":\n1}" },
      { id: "8", event: "message", data: "x" },
    ], `cut at ${cut}`);
  }
});

function token(seq: number, text: string, isFinal = false): TapeEvent {
  return create(TapeEventSchema, { tapeSeq: BigInt(seq), event: { case: "modelToken", value: { token: text, isFinal } } });
}

test("the tape window keeps the newest events in order, once, within its capacity", () => {
  const window = new TapeWindow(100);
  let seq = 0;
  for (let round = 0; round < 50; round++) {
    const batch = Array.from({ length: 37 }, () => token(seq++, "w"));
    window.add(batch);
    window.add(batch.slice(-5)); // a replayed tail after a resume
    assert.ok(window.size <= 100);
  }
  const seqs = window.view().map((e) => Number(e.tapeSeq));
  assert.deepEqual(seqs, Array.from({ length: 100 }, (_, i) => seq - 100 + i));
  assert.equal(window.dropped, seq - 100);
  assert.equal(window.lastSeq, seq - 1);
});

test("the transcript joins a turn's tokens and nests a call's decision, approval and result", () => {
  const ev = (seq: number, event: TapeEvent["event"]) => create(TapeEventSchema, { tapeSeq: BigInt(seq), event });
  const items = transcript([
    ev(0, { case: "userInput", value: { text: "hi" } }),
    ev(1, { case: "toolProposal", value: { proposalId: "p1", toolName: "add", inputJson: "{}",
      decision: { outcome: 3, reason: "ask", policyHash: "h" } } }),
    ev(2, { case: "toolApprovalRequest", value: { approvalId: "a1", proposalId: "p1", toolName: "add" } }),
    ev(3, { case: "toolApprovalResponse", value: { approvalId: "a1", approved: true, scope: 1, decidedBy: "user:x", state: 2 } }),
    ev(4, { case: "toolResult", value: { proposalId: "p1", success: true, outputJson: "{\"result\":1}" } }),
    token(5, "result"), token(6, "=1", true),
    ev(7, { case: "messageReplied", value: { replyText: "result=1" } }),
  ]);
  assert.deepEqual(items.map((i) => i.kind), ["user", "tool", "assistant"]);
  const tool = items[1];
  assert.ok(tool.kind === "tool");
  assert.equal(tool.decision?.outcome, "needs approval");
  assert.deepEqual(tool.approval?.answer, { approved: true, scope: "once", decidedBy: "user:x", state: "approved" });
  assert.equal(tool.result?.output, "{\"result\":1}");
  assert.equal(items[2].kind === "assistant" && items[2].text, "result=1");
});
