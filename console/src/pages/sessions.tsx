// Sessions: list, resolve (get or create), reset, branch, clean up, and set a
// per-session tool posture.

import { useState } from "preact/hooks";
import { ToolPosture } from "../../../generated/ts/palyra/v1/common_pb.js";
import type { Session } from "../../../generated/ts/palyra/v1/common_pb.js";
import { BranchSessionRequestSchema, BranchSessionResponseSchema, CleanupSessionResponseSchema, ListSessionsResponseSchema, ResolveSessionRequestSchema, ResolveSessionResponseSchema, SetToolPostureRequestSchema, SetToolPostureResponseSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { body, type Api } from "../api";
import { Age, ErrorLine, messageOf, Section, usePoll } from "../ui";

const POSTURES = ["unspecified", "always allow", "ask each time", "disabled"];

export function SessionsPage({ api }: { api: Api }) {
  const [archived, setArchived] = useState(false);
  const [list, error, reload] = usePoll(() => api.get("/v1/sessions", ListSessionsResponseSchema, { limit: 200, include_archived: archived }), 5000, [api, archived]);
  const [key, setKey] = useState("");
  const [actionError, setActionError] = useState("");
  const act = async (f: () => Promise<unknown>) => {
    setActionError("");
    try { await f(); reload(); } catch (e) { setActionError(messageOf(e)); }
  };
  const resolve = (e: Event) => {
    e.preventDefault();
    void act(() => api.post("/v1/sessions:resolve", ResolveSessionResponseSchema, body(ResolveSessionRequestSchema, { sessionKey: key.trim() })));
  };
  return (
    <Section title="Sessions" actions={<label class="check"><input type="checkbox" checked={archived} onChange={(e) => setArchived(e.currentTarget.checked)} /> archived too</label>}>
      <form class="inline" onSubmit={resolve}>
        <label for="session-key">Resolve session key</label>
        <input id="session-key" value={key} required onInput={(e) => setKey(e.currentTarget.value)} />
        <button type="submit">Resolve</button>
      </form>
      <ErrorLine error={error || actionError} />
      <div class="cards">
        {list?.sessions.map((s) => <SessionCard key={s.sessionId} api={api} session={s} act={act} />)}
      </div>
    </Section>
  );
}

function SessionCard({ api, session: s, act }: { api: Api; session: Session; act: (f: () => Promise<unknown>) => Promise<void> }) {
  const [tool, setTool] = useState("");
  const [posture, setPosture] = useState<ToolPosture>(ToolPosture.ASK_EACH_TIME);
  const path = `/v1/sessions/${encodeURIComponent(s.sessionId)}`;
  const id = s.sessionId;
  return (
    <article class="card-inner" aria-label={`Session ${s.label || s.sessionKey}`}>
      <div class="card-head"><strong>{s.label || s.sessionKey || s.sessionId}</strong>{s.archived && <span class="badge">archived</span>}</div>
      <p class="muted"><code>{s.sessionId}</code> · key {s.sessionKey} · {String(s.runCount)} runs · updated <Age ms={s.updatedAtUnixMs} />
        {s.parentSessionId && <> · branched from <code>{s.parentSessionId}</code></>}</p>
      <p>{Object.entries(s.toolPostures).map(([t, p]) => <span class="badge" key={t}>{t}: {POSTURES[p]}</span>)}</p>
      <div class="actions">
        <a class="button" href={`#/chat/${encodeURIComponent(s.sessionId)}`}>Chat</a>
        <button onClick={() => act(() => api.post("/v1/sessions:resolve", ResolveSessionResponseSchema, body(ResolveSessionRequestSchema, { sessionId: s.sessionId, resetSession: true })))}>Reset</button>
        <button onClick={() => act(() => api.post(`${path}:branch`, BranchSessionResponseSchema, body(BranchSessionRequestSchema, { sessionId: s.sessionId, sessionLabel: `${s.label || s.sessionKey} (branch)` })))}>Branch</button>
        <button class="deny" onClick={() => act(() => api.post(`${path}:cleanup`, CleanupSessionResponseSchema, {}))}>Clean up</button>
      </div>
      <form class="inline" onSubmit={(e) => { e.preventDefault(); void act(() => api.post(`${path}/tool-postures`, SetToolPostureResponseSchema, body(SetToolPostureRequestSchema, { sessionId: s.sessionId, toolName: tool.trim(), posture }))); }}>
        <label for={`tool-${id}`}>Tool</label>
        <input id={`tool-${id}`} value={tool} required onInput={(e) => setTool(e.currentTarget.value)} />
        <label for={`posture-${id}`}>Posture</label>
        <select id={`posture-${id}`} value={posture} onChange={(e) => setPosture(Number(e.currentTarget.value))}>
          <option value={ToolPosture.ALWAYS_ALLOW}>always allow</option>
          <option value={ToolPosture.ASK_EACH_TIME}>ask each time</option>
          <option value={ToolPosture.DISABLED}>disabled</option>
        </select>
        <button type="submit">Set posture</button>
      </form>
    </article>
  );
}
