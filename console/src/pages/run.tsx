// One run: replay its tape from any position, follow it live over SSE, resume
// after a dropped connection (or a reload) with Last-Event-ID, abort it. The
// view keeps a bounded window of the tape, so a long or fast run cannot grow
// the page's memory.

import { useEffect, useRef, useState } from "preact/hooks";
import { AbortRunRequestSchema, AbortRunResponseSchema, GetRunResponseSchema, ListRunTapeResponseSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { RunState } from "../../../generated/ts/palyra/v1/common_pb.js";
import { body, type Api } from "../api";
import { describe, framesToEvents, runStateName, TapeWindow } from "../tape";
import { Age, ApprovalDecider, ErrorLine, messageOf, usePoll } from "../ui";

/** Events kept (and rendered) by the run view; older ones are dropped from the page. */
export const WINDOW = 500;
const TERMINAL = new Set([RunState.DONE, RunState.FAILED, RunState.CANCELLED]);
const cursorKey = (runId: string) => `palyra.console.run.${runId}.last`;

type Link = "connecting" | "live" | "reconnecting" | "ended";

/** `#/runs/<id>?from=N` opens the view replaying from event N (links from evidence). */
function fromInHash(): number | null {
  const query = location.hash.split("?")[1];
  const value = query ? new URLSearchParams(query).get("from") : null;
  return value !== null && /^\d+$/.test(value) ? Number(value) : null;
}

export function RunPage({ api, runId }: { api: Api; runId: string }) {
  const path = `/v1/runs/${encodeURIComponent(runId)}`;
  const [run, runError, reloadRun] = usePoll(() => api.get(path, GetRunResponseSchema), 1500, [api, runId]);
  const tape = useRef(new TapeWindow(WINDOW));
  const [, setVersion] = useState(0);
  const [link, setLink] = useState<Link>("connecting");
  const [resumedAfter, setResumedAfter] = useState<number | null>(null);
  const [from, setFrom] = useState<number | null>(fromInHash);
  const [fromInput, setFromInput] = useState(String(from ?? 0));
  const [error, setError] = useState("");
  const [reconnects, setReconnects] = useState(0);
  const follow = useRef(true);
  const list = useRef<HTMLOListElement>(null);

  useEffect(() => {
    const controller = new AbortController();
    const window_ = tape.current;
    window_.clear();
    let frame = 0;
    const repaint = () => {
      if (frame) return;
      frame = requestAnimationFrame(() => { frame = 0; setVersion((v) => v + 1); });
    };
    // A stored cursor means this tab saw the run before (a reload): resume after
    // it with Last-Event-ID, showing the events just before it as context.
    const stored = from === null ? sessionStorage.getItem(cursorKey(runId)) : null;
    let lastEventId = stored ?? "";
    setResumedAfter(stored === null ? null : Number(stored));
    const start = async () => {
      if (stored !== null) {
        const before = Math.max(-1, Number(stored) - 100);
        const page = await api.get(`${path}/tape`, ListRunTapeResponseSchema, { after_seq: before, limit: 100 });
        window_.add(page.events.filter((e) => Number(e.tapeSeq) <= Number(stored)));
        repaint();
      }
      // Opened without a position: start at the tape's tail window, so a long run's
      // view does not first replay (and drop) everything before it.
      let startAt = from ?? 0;
      if (from === null && stored === null) {
        const tapeLen = Number((await api.get(path, GetRunResponseSchema)).run?.tapeLen ?? 0n);
        startAt = Math.max(0, tapeLen - WINDOW);
      }
      let attempt = 0;
      while (!controller.signal.aborted) {
        setLink(attempt === 0 ? "connecting" : "reconnecting");
        try {
          await api.stream(`${path}/events`, {
            query: lastEventId ? { batch: true } : { after_seq: startAt - 1, batch: true },
            lastEventId, signal: controller.signal,
            onOpen: () => { setLink("live"); attempt = 0; },
          }, (frames) => {
            window_.add(framesToEvents(frames));
            const id = frames[frames.length - 1].id;
            if (id !== null) {
              lastEventId = id;
              sessionStorage.setItem(cursorKey(runId), id);
            }
            repaint();
          });
          // The daemon ends the stream when the run is over; anything else that ended
          // it (a proxy, the network) is a dropped connection: resume.
          const state = (await api.get(path, GetRunResponseSchema)).run?.state;
          if (state !== undefined && TERMINAL.has(state)) {
            setLink("ended");
            return;
          }
          throw new Error("the event stream ended before the run did");
        } catch (e) {
          if (controller.signal.aborted) return;
          setLink("reconnecting");
          setError(messageOf(e));
          attempt += 1;
          setReconnects((n) => n + 1);
          await new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** attempt)));
        }
      }
    };
    start().catch((e) => setError(messageOf(e)));
    return () => { controller.abort(); cancelAnimationFrame(frame); };
  }, [api, runId, from]);

  useEffect(() => {
    const el = list.current;
    if (el && follow.current) el.scrollTop = el.scrollHeight;
  });

  const abort = async () => {
    try {
      await api.post(`${path}:abort`, AbortRunResponseSchema, body(AbortRunRequestSchema, { runId, reason: "aborted from the web console" }));
      reloadRun();
    } catch (e) {
      setError(messageOf(e));
    }
  };

  const r = run?.run;
  const events = tape.current.view();
  return (
    <div class="run">
      <header class="card-head">
        <h1>Run <code>{runId}</code></h1>
        {r && !TERMINAL.has(r.state) && <button class="deny" onClick={abort}>Abort</button>}
      </header>
      <ErrorLine error={runError} />
      {r && (
        <dl class="facts">
          <dt>State</dt><dd data-testid="run-state">{runStateName(r.state)}</dd>
          <dt>Session</dt><dd><a href={`#/chat/${encodeURIComponent(r.sessionId)}`}>{r.sessionId}</a></dd>
          <dt>Started</dt><dd><Age ms={r.createdAtUnixMs} /></dd>
          <dt>Turns</dt><dd>{r.turnCount}</dd>
          <dt>Tool calls</dt><dd>{r.toolCallCount}</dd>
          <dt>Tape</dt><dd>{String(r.tapeLen)} events</dd>
          {r.endReason && <><dt>End</dt><dd>{r.endReason}</dd></>}
        </dl>
      )}
      {r?.pendingApprovalId && (
        <div class="approval-card">
          <strong>Waiting for approval {r.pendingApprovalId}</strong>
          <ApprovalDecider api={api} approvalId={r.pendingApprovalId} onDone={reloadRun} />
        </div>
      )}
      <form class="inline" onSubmit={(e) => { e.preventDefault(); sessionStorage.removeItem(cursorKey(runId)); setFrom(Math.max(0, Number(fromInput) || 0)); }}>
        <label for="from">Replay from event</label>
        <input id="from" type="number" min={0} value={fromInput} onInput={(e) => setFromInput(e.currentTarget.value)} />
        <button type="submit">Replay</button>
        <label class="check"><input type="checkbox" checked={follow.current} onChange={(e) => { follow.current = e.currentTarget.checked; }} /> Follow</label>
      </form>
      <p class="muted" data-testid="link">
        <span class={`dot ${link}`} aria-hidden="true" /> {link}
        {resumedAfter !== null && <> · resumed after event {resumedAfter} (Last-Event-ID)</>}
        {reconnects > 0 && <> · {reconnects} reconnects</>}
        {" "}· showing {events.length} events{tape.current.dropped > 0 && <>, {tape.current.dropped} earlier ones dropped from view</>}
      </p>
      <ErrorLine error={link === "live" || link === "ended" ? "" : error} />
      <ol class="tape" ref={list} aria-label="Tape">
        {events.map((e) => (
          <li key={String(e.tapeSeq)} data-seq={String(e.tapeSeq)}>
            <span class="seq">{String(e.tapeSeq)}</span>
            <span class={`kind k-${e.event.case ?? "none"}`}>{e.event.case}</span>
            <span class="desc">{describe(e)}</span>
          </li>
        ))}
      </ol>
    </div>
  );
}
