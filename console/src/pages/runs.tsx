// Runs the caller may see (an operator: everyone's), newest first, from ListRuns;
// filtered by state or session and paged with the call's tokens. The page shown
// is reloaded every 2 s.

import { useState } from "preact/hooks";
import { RunState } from "../../../generated/ts/palyra/v1/common_pb.js";
import { ListRunsResponseSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import type { Api } from "../api";
import { runStateName } from "../tape";
import { Age, ErrorLine, Section, usePoll } from "../ui";

const PAGE_SIZE = 50;
const STATES = [RunState.UNSPECIFIED, RunState.PENDING, RunState.ACCEPTED, RunState.IN_PROGRESS,
  RunState.WAITING_FOR_APPROVAL, RunState.DONE, RunState.FAILED, RunState.CANCELLED];

export function RunsPage({ api }: { api: Api }) {
  const [state, setState] = useState(RunState.UNSPECIFIED);
  const [session, setSession] = useState("");
  // Tokens of the pages before the one shown: "Newer" pops, "Older" pushes.
  const [tokens, setTokens] = useState<string[]>([]);
  const token = tokens[tokens.length - 1] ?? "";
  const [page, error] = usePoll(() => api.get("/v1/runs", ListRunsResponseSchema, {
    state: state === RunState.UNSPECIFIED ? "" : `RUN_STATE_${RunState[state]}`,
    session_id: session.trim(), page_size: PAGE_SIZE, page_token: token,
  }), 2000, [api, state, session, token]);
  const filter = (f: () => void) => { f(); setTokens([]); };
  return (
    <Section title="Runs">
      <form class="inline" onSubmit={(e) => e.preventDefault()}>
        <label for="run-state">State</label>
        <select id="run-state" value={state} onChange={(e) => filter(() => setState(Number(e.currentTarget.value)))}>
          {STATES.map((s) => <option key={s} value={s}>{s === RunState.UNSPECIFIED ? "any" : runStateName(s)}</option>)}
        </select>
        <label for="run-session">Session id</label>
        <input id="run-session" value={session} placeholder="any" onInput={(e) => { const v = e.currentTarget.value; filter(() => setSession(v)); }} />
      </form>
      <p class="muted">Newest first, {PAGE_SIZE} a page; refreshed every 2 s.</p>
      <ErrorLine error={error} />
      <div class="table-wrap">
        <table>
          <thead><tr><th scope="col">Run</th><th scope="col">State</th><th scope="col">Session</th><th scope="col">Age</th><th scope="col">Turns</th><th scope="col">Pending approval</th></tr></thead>
          <tbody>
            {page?.runs.map((r) => (
              <tr key={r.runId}>
                <td><a href={`#/runs/${encodeURIComponent(r.runId)}`}><code>{r.runId}</code></a></td>
                <td><span class={`badge state-${r.state}`}>{runStateName(r.state)}</span></td>
                <td><button type="button" class="link" title="Only this session's runs" onClick={() => filter(() => setSession(r.sessionId))}><code>{r.sessionId.slice(-10)}</code></button></td>
                <td><Age ms={r.createdAtUnixMs} /></td>
                <td>{r.turnCount}</td>
                <td>{r.pendingApprovalId ? <a href="#/approvals">{r.pendingApprovalId.slice(-8)}</a> : "—"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {page?.runs.length === 0 && <p class="muted">{token ? "No more runs." : "No runs yet."}</p>}
      <div class="actions">
        <button type="button" disabled={tokens.length === 0} onClick={() => setTokens(tokens.slice(0, -1))}>Newer</button>
        <button type="button" disabled={!page?.nextPageToken} onClick={() => page && setTokens([...tokens, page.nextPageToken])}>Older</button>
      </div>
    </Section>
  );
}
