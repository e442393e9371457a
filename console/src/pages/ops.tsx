// Background and health (operators): tasks (cancel), the watchdog's incidents
// (acknowledge), tokens (issue, list, revoke).

import { useState } from "preact/hooks";
import { CancelTaskRequestSchema, CancelTaskResponseSchema, ListTasksResponseSchema } from "../../../generated/ts/palyra/v1/tasks_pb.js";
import { AcknowledgeIncidentRequestSchema, AcknowledgeIncidentResponseSchema, ListIncidentsResponseSchema } from "../../../generated/ts/palyra/v1/watchdog_pb.js";
import { IssueTokenRequestSchema, IssueTokenResponseSchema, ListTokensResponseSchema, RevokeTokenResponseSchema } from "../../../generated/ts/palyra/v1/tokens_pb.js";
import { body, type Api } from "../api";
import { Age, ErrorLine, messageOf, Section, usePoll, When } from "../ui";

const TASK_STATES = ["unspecified", "queued", "running", "paused", "cancel requested", "succeeded", "failed", "cancelled", "expired"];
const SEVERITY = ["unspecified", "low", "medium", "high"];

export function OpsPage({ api }: { api: Api }) {
  const [tasks, tasksError, reloadTasks] = usePoll(() => api.get("/v1/tasks", ListTasksResponseSchema, { limit: 100 }), 3000, [api]);
  const [incidents, incidentsError, reloadIncidents] = usePoll(() => api.get("/v1/incidents", ListIncidentsResponseSchema, { limit: 100 }), 5000, [api]);
  const [tokens, tokensError, reloadTokens] = usePoll(() => api.get("/v1/tokens", ListTokensResponseSchema), 0, [api]);
  const [error, setError] = useState("");
  const [principal, setPrincipal] = useState("user:");
  const [issued, setIssued] = useState("");
  const act = async (f: () => Promise<unknown>, then: () => void) => {
    setError("");
    try { await f(); then(); } catch (e) { setError(messageOf(e)); }
  };
  return (
    <>
      <ErrorLine error={error} />
      <Section title="Background tasks">
        <ErrorLine error={tasksError} />
        <div class="table-wrap"><table>
          <thead><tr><th scope="col">Task</th><th scope="col">Kind</th><th scope="col">State</th><th scope="col">Attempts</th><th scope="col">Lease</th><th scope="col"></th></tr></thead>
          <tbody>{tasks?.tasks.map((t) => (
            <tr key={t.taskId}>
              <td><code>{t.taskId}</code></td><td>{t.kind}</td><td>{TASK_STATES[t.state]}</td>
              <td>{t.attempts}/{t.maxAttempts}</td>
              <td>{t.lease?.owner && t.lease.expiresAtUnixMs > 0n ? <>{t.lease.owner} until <When ms={t.lease.expiresAtUnixMs} /></> : "—"}</td>
              <td>{t.state <= 3 && <button class="deny" onClick={() => act(() => api.post(`/v1/tasks/${encodeURIComponent(t.taskId)}:cancel`, CancelTaskResponseSchema, body(CancelTaskRequestSchema, { taskId: t.taskId, reason: "cancelled in the web console" })), reloadTasks)}>Cancel</button>}</td>
            </tr>))}</tbody>
        </table></div>
      </Section>
      <Section title="Incidents">
        <ErrorLine error={incidentsError} />
        <ul>{incidents?.incidents.map((i) => (
          <li key={i.incidentId}><span class="badge">{SEVERITY[i.severity]}</span> {i.kind} · {i.detail} · <Age ms={i.detectedAtUnixMs} />
            {i.acknowledgedBy ? <> · acknowledged by {i.acknowledgedBy}</> :
              <> <button onClick={() => act(() => api.post(`/v1/incidents/${encodeURIComponent(i.incidentId)}:acknowledge`, AcknowledgeIncidentResponseSchema, body(AcknowledgeIncidentRequestSchema, { incidentId: i.incidentId, note: "acknowledged in the web console" })), reloadIncidents)}>Acknowledge</button></>}
          </li>))}</ul>
      </Section>
      <Section title="Tokens">
        <ErrorLine error={tokensError} />
        <form class="inline" onSubmit={(e) => { e.preventDefault(); void act(async () => setIssued((await api.post("/v1/tokens", IssueTokenResponseSchema, body(IssueTokenRequestSchema, { principal: principal.trim(), label: "issued in the web console" }))).token), reloadTokens); }}>
          <label for="token-principal">Issue a token for</label>
          <input id="token-principal" value={principal} onInput={(e) => setPrincipal(e.currentTarget.value)} />
          <button type="submit">Issue</button>
        </form>
        {issued && <p role="status">New token (shown once): <code>{issued}</code></p>}
        <ul>{tokens?.tokens.map((t) => (
          <li key={t.tokenId}><code>{t.tokenId}</code> {t.principal} · {t.label} · issued <Age ms={t.createdAtUnixMs} />
            {t.revokedAtUnixMs > 0n ? <> · revoked</> : <> <button class="link" onClick={() => act(() => api.post(`/v1/tokens/${encodeURIComponent(t.tokenId)}:revoke`, RevokeTokenResponseSchema, {}), reloadTokens)}>Revoke</button></>}
          </li>))}</ul>
      </Section>
    </>
  );
}
