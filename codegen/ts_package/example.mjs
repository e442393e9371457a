// A whole palyra turn from Node, with nothing but @palyra/client and its peers.
//
//   PALYRA_ADDR=http://127.0.0.1:7443 PALYRA_TOKEN=$(cat palyra-data/admin.token) node turn.mjs
//
// It asks every `add` call of its session for approval, runs a two-step tool
// loop over RunStream, approves the first call inline on the stream and the
// second through ApprovalsService (as a second client would), then replays
// the run's tape from a cursor with WatchRun. Both streams ask for `batch`, so
// each response carries the events of one journal commit in `events`.
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  ApprovalDecision,
  ApprovalsService,
  GatewayService,
  RunState,
  RunStreamRequestSchema,
  ToolPosture,
} from "@palyra/client";

const addr = process.env.PALYRA_ADDR ?? "http://127.0.0.1:7443";
const token = process.env.PALYRA_TOKEN ?? "";
const headers = {
  authorization: `Bearer ${token}`,
  "x-palyra-principal": process.env.PALYRA_PRINCIPAL ?? "user:node-example",
  "x-palyra-device-id": "01J00000000000000000000000",
};

// Every call carries the credentials; an interceptor adds them once.
const transport = createGrpcTransport({
  baseUrl: addr,
  interceptors: [(next) => async (req) => {
    for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
    return next(req);
  }],
});
const gateway = createClient(GatewayService, transport);
const approvals = createClient(ApprovalsService, transport);

// 1. A session whose `add` calls each need a human decision.
const sessionKey = `node-example-${Date.now()}`;
const { session } = await gateway.resolveSession({ sessionKey });
await gateway.setToolPosture({
  sessionId: session.sessionId, toolName: "add", posture: ToolPosture.ASK_EACH_TIME,
});

// 2. RunStream: the client writes requests, the daemon streams tape events back.
const outbox = [];
let wake = () => {};
let closed = false;
async function* requests() {
  yield create(RunStreamRequestSchema, {
    v: 1, sessionId: session.sessionId, batch: true,
    input: { text: "Start from 0 and add 1 to the running total 2 times, one add tool call per step, then reply with the final result." },
  });
  for (;;) {
    while (outbox.length) yield outbox.shift();
    if (closed) return;
    await new Promise((resolve) => { wake = resolve; });
  }
}
const send = (request) => { outbox.push(request); wake(); };
const finish = () => { closed = true; wake(); };

let runId = "";
let approved = 0;
let finalText = "";
for await (const { events } of gateway.runStream(requests())) {
  for (const event of events) {
    runId = event.runId;
    const { case: kind, value } = event.event;
    if (kind === "toolApprovalRequest") {
      approved += 1;
      if (approved === 1) {
        // The first call: decided inline, on this same stream.
        send(create(RunStreamRequestSchema, {
          v: 1, approval: { approvalId: value.approvalId, decision: ApprovalDecision.APPROVE },
        }));
        console.log(`approved inline: ${value.toolName} (${value.approvalId})`);
      } else {
        // The second: decided through ApprovalsService, as any other client could.
        const { approval } = await approvals.decideApproval({
          approvalId: value.approvalId, decision: ApprovalDecision.APPROVE, reason: "looks fine",
        });
        console.log(`approved via ApprovalsService: ${approval.toolName} by ${approval.decidedBy}`);
      }
    } else if (kind === "messageReplied") {
      finalText = value.replyText;
      finish(); // half-close: the run completes once its loop is idle
    } else if (kind === "status") {
      console.log(`status ${RunState[value.state]} (${value.reason})`);
    }
  }
}
console.log(`reply: ${finalText}`);

// 3. Resume from a cursor: replay everything after tape_seq 3, then stop.
let replayed = 0;
for await (const { events } of gateway.watchRun({ runId, afterSeq: 3n, noFollow: true, batch: true })) {
  for (const event of events) {
    if (event.tapeSeq <= 3n) throw new Error(`cursor not honoured: ${event.tapeSeq}`);
    replayed += 1;
  }
}
const { run } = await gateway.getRun({ runId });
console.log(`DONE run=${runId} state=${RunState[run.state]} replayed=${replayed} ${finalText}`);
