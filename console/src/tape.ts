// Pure views over a run's tape: the chat transcript (events folded into cards)
// and the run view's bounded window. No I/O here.

import type { TapeEvent } from "../../generated/ts/palyra/v1/tape_pb.js";
import { TapeEventSchema } from "../../generated/ts/palyra/v1/tape_pb.js";
import { RunStreamResponseSchema } from "../../generated/ts/palyra/v1/gateway_pb.js";
import type { JsonValue } from "@bufbuild/protobuf";
import { parse } from "./api";
import type { SseFrame } from "./sse";

/** The tape events carried by SSE frames of RunStream, WatchRun or ListRunTape pages. */
export function framesToEvents(frames: SseFrame[]): TapeEvent[] {
  const events: TapeEvent[] = [];
  for (const frame of frames) {
    const json = JSON.parse(frame.data) as JsonValue;
    const message = parse(RunStreamResponseSchema, json); // same shape as WatchRunResponse
    if (message.event) events.push(message.event);
    for (const e of message.events) events.push(e);
  }
  return events;
}

export function tapeEventFromJson(json: JsonValue): TapeEvent {
  return parse(TapeEventSchema, json);
}

export type Item =
  | { kind: "user"; seq: number; text: string }
  | { kind: "assistant"; seq: number; text: string; final: boolean }
  | { kind: "tool"; seq: number; proposalId: string; tool: string; input: string;
      decision?: { outcome: string; reason: string; policyHash: string };
      approval?: Extract<Item, { kind: "approval" }>;
      result?: { success: boolean; output: string; error: string } }
  | { kind: "approval"; seq: number; approvalId: string; tool: string; title: string;
      summary: string; risk: string; expiresAtMs: number;
      answer?: { approved: boolean; scope: string; decidedBy: string; state: string } }
  | { kind: "status"; seq: number; text: string }
  | { kind: "error"; seq: number; text: string };

const OUTCOMES = ["unspecified", "allow", "deny", "needs approval"];
const RISKS = ["unspecified", "low", "medium", "high", "critical"];
const SCOPES = ["unspecified", "once", "session", "timeboxed"];
const STATES = ["unspecified", "pending", "approved", "denied", "timed out", "expired", "cancelled"];
const RUN_STATES = ["unspecified", "pending", "accepted", "in progress", "waiting for approval",
                    "done", "failed", "cancelled"];

export const runStateName = (n: number): string => RUN_STATES[n] ?? String(n);
export const riskName = (n: number): string => RISKS[n] ?? String(n);
export const approvalStateName = (n: number): string => STATES[n] ?? String(n);
export const scopeName = (n: number): string => SCOPES[n] ?? String(n);

/** Fold tape events (in tape order) into transcript items; pure and incremental-safe. */
export function transcript(events: readonly TapeEvent[]): Item[] {
  const items: Item[] = [];
  const tools = new Map<string, Extract<Item, { kind: "tool" }>>();
  const approvals = new Map<string, Extract<Item, { kind: "approval" }>>();
  let assistant: Extract<Item, { kind: "assistant" }> | null = null;
  for (const e of events) {
    const seq = Number(e.tapeSeq);
    const ev = e.event;
    switch (ev.case) {
      case "userInput":
        items.push({ kind: "user", seq, text: ev.value.text });
        assistant = null;
        break;
      case "modelToken":
        if (!assistant || assistant.final) {
          assistant = { kind: "assistant", seq, text: "", final: false };
          items.push(assistant);
        }
        assistant.text += ev.value.token;
        if (ev.value.isFinal) assistant.final = true;
        break;
      case "messageReplied":
        if (!assistant) items.push({ kind: "assistant", seq, text: ev.value.replyText, final: true });
        else assistant.final = true;
        assistant = null;
        break;
      case "toolProposal": {
        const item: Extract<Item, { kind: "tool" }> = {
          kind: "tool", seq, proposalId: ev.value.proposalId, tool: ev.value.toolName,
          input: ev.value.inputJson,
        };
        const d = ev.value.decision; // the policy decision rides on the proposal
        if (d) item.decision = { outcome: OUTCOMES[d.outcome] ?? "?", reason: d.reason, policyHash: d.policyHash };
        tools.set(item.proposalId, item);
        items.push(item);
        assistant = null;
        break;
      }
      case "toolDecision": {
        const item = tools.get(ev.value.proposalId);
        if (item) item.decision = { outcome: OUTCOMES[ev.value.outcome] ?? "?", reason: ev.value.reason,
                                     policyHash: ev.value.policyHash };
        break;
      }
      case "toolApprovalRequest": {
        const p = ev.value.prompt;
        const item: Extract<Item, { kind: "approval" }> = {
          kind: "approval", seq, approvalId: ev.value.approvalId, tool: ev.value.toolName,
          title: p?.title ?? "", summary: p?.summary ?? "", risk: riskName(p?.riskLevel ?? 0),
          expiresAtMs: Number(ev.value.expiresAtUnixMs),
        };
        approvals.set(item.approvalId, item);
        // Shown inside its tool call's card when the call is on this tape.
        const tool = tools.get(ev.value.proposalId);
        if (tool) tool.approval = item;
        else items.push(item);
        break;
      }
      case "toolApprovalResponse": {
        const item = approvals.get(ev.value.approvalId);
        if (item) item.answer = { approved: ev.value.approved, scope: scopeName(ev.value.scope),
                                  decidedBy: ev.value.decidedBy, state: approvalStateName(ev.value.state) };
        break;
      }
      case "toolResult": {
        const item = tools.get(ev.value.proposalId);
        if (item) item.result = { success: ev.value.success, output: ev.value.outputJson, error: ev.value.error };
        break;
      }
      case "status":
        items.push({ kind: "status", seq, text: `run ${runStateName(ev.value.state)}${ev.value.reason ? ` (${ev.value.reason})` : ""}` });
        break;
      case "error":
        items.push({ kind: "error", seq, text: ev.value.message || "error" });
        break;
      default:
        break;
    }
  }
  return items;
}

/** A bounded tail of a tape: at most `capacity` events kept, in order, none twice. */
export class TapeWindow {
  private events: TapeEvent[] = [];
  /** Events dropped from the front to stay within capacity. */
  dropped = 0;
  constructor(readonly capacity: number) {}

  get lastSeq(): number {
    const last = this.events[this.events.length - 1];
    return last ? Number(last.tapeSeq) : -1;
  }

  get size(): number {
    return this.events.length;
  }

  /** Append events after the last kept one; replayed duplicates are ignored. */
  add(batch: readonly TapeEvent[]): void {
    let last = this.lastSeq;
    for (const e of batch) {
      const seq = Number(e.tapeSeq);
      if (seq <= last) continue;
      this.events.push(e);
      last = seq;
    }
    const excess = this.events.length - this.capacity;
    if (excess > 0) {
      this.events.splice(0, excess);
      this.dropped += excess;
    }
  }

  clear(): void {
    this.events = [];
    this.dropped = 0;
  }

  view(): readonly TapeEvent[] {
    return this.events;
  }
}

/** One line of a tape event for the run view. */
export function describe(e: TapeEvent): string {
  const ev = e.event;
  switch (ev.case) {
    case "status": return `${runStateName(ev.value.state)} ${ev.value.reason}`.trim();
    case "modelToken": return JSON.stringify(ev.value.token);
    case "toolProposal": return `${ev.value.toolName} ${ev.value.inputJson}`;
    case "toolDecision": return `${OUTCOMES[ev.value.outcome] ?? "?"} ${ev.value.reason}`.trim();
    case "toolApprovalRequest": return `${ev.value.toolName}: ${ev.value.prompt?.title ?? ""} (${ev.value.approvalId})`;
    case "toolApprovalResponse": return `${ev.value.approved ? "approved" : "denied"} by ${ev.value.decidedBy} (${scopeName(ev.value.scope)})`;
    case "toolResult": return `${ev.value.toolName} ${ev.value.success ? "ok" : "failed"} ${ev.value.outputJson || ev.value.error}`;
    case "messageReplied": return ev.value.replyText;
    case "userInput": return ev.value.text;
    case "agentLoop": return `phase ${ev.value.phase} turn ${ev.value.turn} ${ev.value.reason}`.trim();
    case "providerTurnOutput": return `turn ${ev.value.turn}: ${ev.value.finishReason}, ${ev.value.toolCallCount} tool calls`;
    case "error": return ev.value.message;
    case "contextStage": return `${ev.value.stage}: ${ev.value.tokens} tokens ${ev.value.reason}`.trim();
    case "sessionCompaction": return `compacted ${ev.value.firstSeq}..${ev.value.lastSeq}`;
    case "toolCatalogSnapshot": return ev.value.toolNames.join(", ");
    case "toolAttestation": return ev.value.executionSha256.slice(0, 16);
    default: return "";
  }
}
