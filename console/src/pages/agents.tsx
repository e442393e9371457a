// Agents (operators): list, create, edit (system prompt, tool postures) and bindings.

import { useState } from "preact/hooks";
import { ToolPosture } from "../../../generated/ts/palyra/v1/common_pb.js";
import type { Agent } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { BindAgentRequestSchema, BindAgentResponseSchema, CreateAgentRequestSchema, CreateAgentResponseSchema, ListAgentBindingsResponseSchema, ListAgentsResponseSchema, UpdateAgentRequestSchema, UpdateAgentResponseSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { body, type Api } from "../api";
import { ErrorLine, messageOf, Section, usePoll } from "../ui";

const POSTURE_BY_NAME: Record<string, ToolPosture> = {
  always_allow: ToolPosture.ALWAYS_ALLOW, ask_each_time: ToolPosture.ASK_EACH_TIME, disabled: ToolPosture.DISABLED,
};
const NAME_OF_POSTURE = ["", "always_allow", "ask_each_time", "disabled"];

/** "tool=posture" lines ⇄ the agent's posture map. */
export function parsePostures(text: string): Record<string, ToolPosture> {
  const out: Record<string, ToolPosture> = {};
  for (const line of text.split("\n")) {
    const [tool, posture] = line.split("=").map((s) => s.trim());
    if (tool && posture && posture in POSTURE_BY_NAME) out[tool] = POSTURE_BY_NAME[posture];
  }
  return out;
}

export function AgentsPage({ api }: { api: Api }) {
  const [list, error, reload] = usePoll(() => api.get("/v1/agents", ListAgentsResponseSchema, { limit: 200 }), 0, [api]);
  const [editing, setEditing] = useState<Agent | "new" | null>(null);
  return (
    <Section title="Agents" actions={<button onClick={() => setEditing("new")}>New agent</button>}>
      <ErrorLine error={error} />
      {editing && <AgentForm api={api} agent={editing === "new" ? null : editing} onDone={() => { setEditing(null); reload(); }} />}
      <div class="cards">
        {list?.agents.map((a) => (
          <article class="card-inner" key={a.agentId}>
            <div class="card-head"><strong>{a.displayName || a.agentId}</strong><button onClick={() => setEditing(a)}>Edit</button></div>
            <p class="muted"><code>{a.agentId}</code> {a.model && <>· {a.provider}/{a.model}</>}</p>
            <pre class="json">{a.systemPrompt}</pre>
            <p>{Object.entries(a.toolPostures).map(([t, p]) => <span class="badge" key={t}>{t}: {NAME_OF_POSTURE[p]}</span>)}</p>
            <Bindings api={api} agentId={a.agentId} />
          </article>
        ))}
      </div>
    </Section>
  );
}

function AgentForm({ api, agent, onDone }: { api: Api; agent: Agent | null; onDone: () => void }) {
  const [name, setName] = useState(agent?.displayName ?? "");
  const [prompt, setPrompt] = useState(agent?.systemPrompt ?? "");
  const [postures, setPostures] = useState(Object.entries(agent?.toolPostures ?? {}).map(([t, p]) => `${t}=${NAME_OF_POSTURE[p]}`).join("\n"));
  const [error, setError] = useState("");
  const save = async (e: Event) => {
    e.preventDefault();
    // The daemon chooses a new agent's id (a client-chosen one is refused).
    const init = { agentId: agent?.agentId ?? "", displayName: name, systemPrompt: prompt, toolPostures: parsePostures(postures) };
    try {
      if (agent) await api.patch(`/v1/agents/${encodeURIComponent(agent.agentId)}`, UpdateAgentResponseSchema, body(UpdateAgentRequestSchema, { agentId: agent.agentId, agent: init }));
      else await api.post("/v1/agents", CreateAgentResponseSchema, body(CreateAgentRequestSchema, { agent: init }));
      onDone();
    } catch (err) { setError(messageOf(err)); }
  };
  return (
    <form class="card-inner stack" onSubmit={save}>
      {agent && <p class="muted">Agent id <code id="agent-id">{agent.agentId}</code></p>}
      <label for="agent-name">Display name</label>
      <input id="agent-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
      <label for="agent-prompt">System prompt</label>
      <textarea id="agent-prompt" rows={4} value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} />
      <label for="agent-postures">Tool postures (one <code>tool=always_allow|ask_each_time|disabled</code> a line)</label>
      <textarea id="agent-postures" rows={3} value={postures} onInput={(e) => setPostures(e.currentTarget.value)} />
      <div class="actions"><button type="submit">Save</button><button type="button" class="link" onClick={onDone}>Cancel</button></div>
      <ErrorLine error={error} />
    </form>
  );
}

function Bindings({ api, agentId }: { api: Api; agentId: string }) {
  const path = `/v1/agents/${encodeURIComponent(agentId)}/bindings`;
  const [list, error, reload] = usePoll(() => api.get(path, ListAgentBindingsResponseSchema), 0, [api, agentId]);
  const [key, setKey] = useState("");
  const [bindError, setBindError] = useState("");
  const bind = async (e: Event) => {
    e.preventDefault();
    try { await api.post(path, BindAgentResponseSchema, body(BindAgentRequestSchema, { agentId, binding: { agentId, sessionKey: key.trim() } })); setKey(""); reload(); }
    catch (err) { setBindError(messageOf(err)); }
  };
  return (
    <div>
      <ErrorLine error={error || bindError} />
      <ul>{list?.bindings.map((b) => <li key={b.bindingId}>{b.channel || "any channel"} {b.conversationId} {b.sessionKey && <>session key {b.sessionKey}</>}</li>)}</ul>
      <form class="inline" onSubmit={bind}>
        <label for={`bind-${agentId}`}>Bind session key</label>
        <input id={`bind-${agentId}`} value={key} required onInput={(e) => setKey(e.currentTarget.value)} />
        <button type="submit">Bind</button>
      </form>
    </div>
  );
}
