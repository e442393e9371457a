// Chat: pick or create a session, send a message, watch the turn stream in with
// tool calls, policy decisions, results and approval requests as cards.

import { useEffect, useRef, useState } from "preact/hooks";
import type { TapeEvent } from "../../../generated/ts/palyra/v1/tape_pb.js";
import { ListRunTapeResponseSchema, ListSessionsResponseSchema, RunStreamRequestSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { body, type Api } from "../api";
import { newUlid } from "../auth";
import { framesToEvents, transcript, type Item } from "../tape";
import { ApprovalDecider, ErrorLine, Json, messageOf, usePoll, When } from "../ui";

export const INTERACTIVE_MARK = "palyra:chat-interactive";

export function ChatPage({ api, sessionId }: { api: Api; sessionId: string }) {
  const [sessions, listError, reload] = usePoll(
    () => api.get("/v1/sessions", ListSessionsResponseSchema, { limit: 100 }), 0, [api]);
  const [events, setEvents] = useState<TapeEvent[]>([]);
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [runId, setRunId] = useState("");
  const input = useRef<HTMLTextAreaElement>(null);
  const list = useRef<HTMLOListElement>(null);
  useEffect(() => { const el = list.current; if (el) el.scrollTop = el.scrollHeight; }, [events]);
  const session = sessions?.sessions.find((s) => s.sessionId === sessionId);

  // Set while a turn streams: the first turn of a new chat moves the page to its
  // new session, which must not wipe (or reload) the turn being shown.
  const live = useRef(false);
  const shown = useRef(""); // the run whose tape is on screen

  // Show the session's latest run when the session is opened.
  useEffect(() => {
    const last = session?.lastRunId ?? "";
    // Nothing to do while a turn streams, or when its run is the one on screen.
    if (live.current || (last && last === shown.current)) return;
    setEvents([]);
    setRunId("");
    shown.current = "";
    if (!last) return;
    let alive = true;
    api.get(`/v1/runs/${encodeURIComponent(last)}/tape`, ListRunTapeResponseSchema, { limit: 1000 })
      .then((page) => { if (alive) { setEvents(page.events); setRunId(last); shown.current = last; } })
      .catch((e) => { if (alive) setError(messageOf(e)); });
    return () => { alive = false; };
  }, [api, sessionId, session?.lastRunId]);

  useEffect(() => { input.current?.focus(); }, [sessionId]);

  // User Timing mark for bench/console.py: the chat is usable (sessions listed,
  // composer rendered) this many ms after navigation started.
  useEffect(() => {
    if (sessions && performance.getEntriesByName(INTERACTIVE_MARK).length === 0) performance.mark(INTERACTIVE_MARK);
  }, [sessions]);

  const send = async (e: Event) => {
    e.preventDefault();
    const message = text.trim();
    if (!message || busy) return;
    setBusy(true);
    live.current = true;
    setError("");
    setEvents([]);
    setText("");
    let seen: TapeEvent[] = [];
    try {
      await api.stream("/v1/runs:stream", {
        method: "POST",
        json: body(RunStreamRequestSchema, {
          sessionId, sessionKey: sessionId ? "" : `console-${newUlid()}`,
          sessionLabel: sessionId ? "" : message.slice(0, 48),
          input: { text: message }, complete: true, batch: true,
        }),
      }, (frames) => {
        seen = seen.concat(framesToEvents(frames));
        setEvents(seen);
        const first = seen[0];
        if (first) { setRunId(first.runId); shown.current = first.runId; }
        if (!sessionId && first?.sessionId) location.hash = `#/chat/${encodeURIComponent(first.sessionId)}`;
      });
    } catch (err) {
      setError(messageOf(err));
    } finally {
      live.current = false;
      setBusy(false);
      reload();
    }
  };

  return (
    <div class="chat">
      <aside class="sessions" aria-label="Sessions">
        <a class="button" href="#/chat">New chat</a>
        <ErrorLine error={listError} />
        <ul>
          {sessions?.sessions.map((s) => (
            <li key={s.sessionId}>
              <a href={`#/chat/${encodeURIComponent(s.sessionId)}`}
                 aria-current={s.sessionId === sessionId ? "page" : undefined}>
                {s.label || s.sessionKey || s.sessionId}
                <small>{String(s.runCount)} runs</small>
              </a>
            </li>
          ))}
        </ul>
      </aside>
      <section class="conversation" aria-label="Conversation">
        <header class="card-head">
          <h1>{session ? session.label || session.sessionKey : "New chat"}</h1>
          {runId && <a href={`#/runs/${encodeURIComponent(runId)}`}>run {runId.slice(-8)}</a>}
        </header>
        <ol class="transcript" aria-live="polite" ref={list}>
          {transcript(events).map((item) => <li key={`${item.kind}-${item.seq}`}><ItemCard api={api} item={item} /></li>)}
        </ol>
        <ErrorLine error={error} />
        <form class="composer" onSubmit={send}>
          <label for="message" class="sr-only">Message</label>
          <textarea id="message" ref={input} rows={2} value={text} placeholder="Message the agent…"
                    onInput={(e) => setText(e.currentTarget.value)}
                    onKeyDown={(e) => { if (e.key === "Enter" && !e.shiftKey) send(e); }} />
          <button type="submit" disabled={busy || !text.trim()}>{busy ? "Running…" : "Send"}</button>
        </form>
      </section>
    </div>
  );
}

function ItemCard({ api, item }: { api: Api; item: Item }) {
  switch (item.kind) {
    case "user": return <div class="msg user"><span class="who">you</span><p>{item.text}</p></div>;
    case "assistant": return <div class="msg assistant"><span class="who">agent</span><p>{item.text}</p></div>;
    case "tool": return (
      <div class="tool-card" data-tool={item.tool}>
        <div class="card-head"><strong>tool · {item.tool}</strong>
          {item.decision && <span class={`badge ${item.decision.outcome.replace(" ", "-")}`}>policy: {item.decision.outcome}</span>}
        </div>
        <Json text={item.input} />
        {item.decision?.reason && <p class="muted">{item.decision.reason}</p>}
        {item.approval && <ApprovalBlock api={api} item={item.approval} />}
        {item.result && (
          <div class={item.result.success ? "result ok" : "result failed"}>
            <span>{item.result.success ? "result" : "failed"}</span>
            <Json text={item.result.output || item.result.error} />
          </div>
        )}
      </div>
    );
    case "approval": return <ApprovalBlock api={api} item={item} />;
    case "status": return <p class="status">{item.text}</p>;
    case "error": return <p class="error">{item.text}</p>;
  }
}

function ApprovalBlock({ api, item }: { api: Api; item: Extract<Item, { kind: "approval" }> }) {
  return (
    <div class="approval-card" role="group" aria-label={`Approval for ${item.tool}`}>
      <div class="card-head"><strong>approval needed · {item.tool}</strong><span class={`badge risk-${item.risk}`}>risk {item.risk}</span></div>
      <p>{item.title}</p>
      {item.summary && <p class="muted">{item.summary}</p>}
      {item.answer
        ? <p class={item.answer.approved ? "decided ok" : "decided failed"}>
            {item.answer.approved ? "Approved" : "Denied"} ({item.answer.scope}) by {item.answer.decidedBy}
          </p>
        : <>
            {item.expiresAtMs > 0 && <p class="muted">expires <When ms={item.expiresAtMs} /></p>}
            <ApprovalDecider api={api} approvalId={item.approvalId} />
          </>}
    </div>
  );
}
