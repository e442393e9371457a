// Channels: pending pairing requests (approvals of `dm_pairing`) to approve or
// deny; the channels the daemon knows with their health (ListChannels: kind, mode,
// outbox and quarantine figures); and for a chosen channel its pairing codes,
// grants and quarantine. A RouteMessage channel the daemon has no table for can
// still be opened by its id.

import { useState } from "preact/hooks";
import { ListApprovalsResponseSchema } from "../../../generated/ts/palyra/v1/approvals_pb.js";
import { CreatePairingCodeRequestSchema, CreatePairingCodeResponseSchema, ListChannelsResponseSchema, ListPairingCodesResponseSchema, ListPairingGrantsResponseSchema, ListQuarantineResponseSchema, RevokePairingGrantResponseSchema } from "../../../generated/ts/palyra/v1/channels_pb.js";
import { body, type Api } from "../api";
import { ApprovalCard } from "./approvals";
import { Age, ErrorLine, messageOf, Section, usePoll, When } from "../ui";

const MODES: Record<string, string> = { two_way: "replies", inbound_only: "inbound only" };

export function ChannelsPage({ api }: { api: Api }) {
  const [pending, error, reload] = usePoll(
    () => api.get("/v1/approvals", ListApprovalsResponseSchema, { state: "APPROVAL_STATE_PENDING", limit: 100 }), 2000, [api]);
  const [list, listError] = usePoll(() => api.get("/v1/channels", ListChannelsResponseSchema), 5000, [api]);
  const pairing = (pending?.approvals ?? []).filter((a) => a.toolName === "dm_pairing");
  const [channel, setChannel] = useState("");
  const [shown, setShown] = useState("");
  return (
    <>
      <Section title={`Pairing requests (${pairing.length})`}>
        <ErrorLine error={error} />
        {pairing.length === 0 && <p class="muted">No sender waits for a pairing.</p>}
        <div class="cards">
          {pairing.map((a) => <ApprovalCard key={a.approvalId} api={api} approval={a} onDone={reload} />)}
        </div>
      </Section>
      <Section title="Channels">
        <ErrorLine error={listError} />
        {list && !list.routerEnabled && <p class="muted">The channel router is disabled (<code>[channels] enabled = false</code>).</p>}
        <div class="table-wrap">
          <table data-testid="channels">
            <thead><tr><th scope="col">Channel</th><th scope="col">Kind</th><th scope="col">Mode</th><th scope="col">DMs</th><th scope="col">Slots</th><th scope="col">Outbox pending</th><th scope="col">Outbox failed</th><th scope="col">Quarantined</th><th scope="col"><span class="sr-only">Open</span></th></tr></thead>
            <tbody>
              {list?.channels.map((c) => (
                <tr key={c.channel} data-channel={c.channel} class={c.channel === shown ? "selected" : ""}>
                  <td><code>{c.channel}</code></td>
                  <td>{c.kind}</td>
                  <td>{MODES[c.mode] ?? c.mode}</td>
                  <td>{c.dmPolicy}</td>
                  <td>{c.concurrency}</td>
                  <td>{String(c.outboxPending)}</td>
                  <td class={c.outboxFailed > 0n ? "warn" : ""}>{String(c.outboxFailed)}</td>
                  <td class={c.quarantined > 0n ? "warn" : ""}>{String(c.quarantined)}</td>
                  <td><button type="button" onClick={() => setShown(c.channel)}>Show</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        {list?.channels.length === 0 && <p class="muted">No channel is configured.</p>}
        <details>
          <summary>Another channel (RouteMessage only, no table in the config)</summary>
          <form class="inline" onSubmit={(e) => { e.preventDefault(); setShown(channel.trim()); }}>
            <label for="channel">Channel id</label>
            <input id="channel" placeholder="slack:acme or webhook:ops" value={channel} onInput={(e) => setChannel(e.currentTarget.value)} />
            <button type="submit">Open</button>
          </form>
        </details>
      </Section>
      {shown && <Section title={`Channel ${shown}`}><ChannelDetail api={api} channel={shown} key={shown} /></Section>}
    </>
  );
}

function ChannelDetail({ api, channel }: { api: Api; channel: string }) {
  const base = `/v1/channels/${encodeURIComponent(channel)}`;
  const [codes, codesError, reloadCodes] = usePoll(() => api.get(`${base}/pairing-codes`, ListPairingCodesResponseSchema), 5000, [api, channel]);
  const [grants, grantsError, reloadGrants] = usePoll(() => api.get(`${base}/grants`, ListPairingGrantsResponseSchema), 5000, [api, channel]);
  const [quarantine, quarantineError] = usePoll(() => api.get(`${base}/quarantine`, ListQuarantineResponseSchema, { limit: 100 }), 5000, [api, channel]);
  const [error, setError] = useState("");
  const issue = async () => {
    setError("");
    try { await api.post(`${base}/pairing-codes`, CreatePairingCodeResponseSchema, body(CreatePairingCodeRequestSchema, { channel, ttlSeconds: 600 })); reloadCodes(); }
    catch (e) { setError(messageOf(e)); }
  };
  const revoke = async (grantId: string) => {
    setError("");
    try { await api.del(`${base}/grants/${encodeURIComponent(grantId)}`, RevokePairingGrantResponseSchema); reloadGrants(); }
    catch (e) { setError(messageOf(e)); }
  };
  return (
    <div class="channel">
      <ErrorLine error={error || codesError || grantsError || quarantineError} />
      <h3>Pairing codes <button onClick={issue}>Issue a code</button></h3>
      <ul>{codes?.codes.map((c) => <li key={c.code}><code>{c.code}</code> expires <When ms={c.expiresAtUnixMs} /> · by {c.issuedBy}</li>)}</ul>
      <h3>Grants</h3>
      <ul>{grants?.grants.map((g) => (
        <li key={g.grantId}>{g.sender} · granted <Age ms={g.grantedAtUnixMs} />
          {g.expiresAtUnixMs > 0n && <> · until <When ms={g.expiresAtUnixMs} /></>}
          {" "}<button class="link" onClick={() => revoke(g.grantId)}>Revoke</button></li>))}</ul>
      <h3>Quarantine</h3>
      <ul>{quarantine?.messages.map((m) => <li key={m.quarantineId}><strong>{m.reason}</strong> · {m.sender}: {m.text}</li>)}</ul>
    </div>
  );
}
