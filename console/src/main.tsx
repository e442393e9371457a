// The console's shell: sign-in, navigation, hash routes.

import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { ListSessionsResponseSchema } from "../../generated/ts/palyra/v1/gateway_pb.js";
import { ListTokensResponseSchema } from "../../generated/ts/palyra/v1/tokens_pb.js";
import { ApiError, createApi, type Api } from "./api";
import { deviceId, forgetCredentials, loadCredentials, saveCredentials, type Credentials } from "./auth";
import { messageOf, ErrorLine } from "./ui";
import { ChatPage } from "./pages/chat";
import { RunsPage } from "./pages/runs";
import { RunPage } from "./pages/run";
import { ApprovalsPage } from "./pages/approvals";
import { JournalPage } from "./pages/journal";
import { SessionsPage } from "./pages/sessions";
import { ChannelsPage } from "./pages/channels";
import { LearningPage } from "./pages/learning";
import { AgentsPage } from "./pages/agents";
import { MemoryPage } from "./pages/memory";
import { OpsPage } from "./pages/ops";

interface Route { path: string; label: string; operator?: boolean }
const NAV: Route[] = [
  { path: "chat", label: "Chat" },
  { path: "runs", label: "Runs" },
  { path: "approvals", label: "Approvals" },
  { path: "sessions", label: "Sessions" },
  { path: "journal", label: "Journal" },
  { path: "channels", label: "Channels", operator: true },
  { path: "learning", label: "Learning" },
  { path: "agents", label: "Agents", operator: true },
  { path: "memory", label: "Memory" },
  { path: "ops", label: "Tasks & health", operator: true },
];

function useHash(): string[] {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash.replace(/^#\/?/, "").split("?")[0].split("/").filter(Boolean).map(decodeURIComponent);
}

function SignIn({ onSignedIn }: { onSignedIn: (c: Credentials) => void }) {
  const [token, setToken] = useState("");
  const [principal, setPrincipal] = useState("user:console");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    const credentials: Credentials = { token: token.trim(), principal: principal.trim(), device: deviceId(), operator: false };
    try {
      const api = createApi(credentials);
      await api.get("/v1/sessions", ListSessionsResponseSchema, { limit: 1 });
      try {
        await api.get("/v1/tokens", ListTokensResponseSchema);
        credentials.operator = true;
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 403) throw err;
      }
      saveCredentials(credentials);
      onSignedIn(credentials);
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form class="card" onSubmit={submit}>
        <h1>palyra console</h1>
        <p class="muted">Sign in with the admin token (<code>palyra-data/admin.token</code>) or a token issued to you.
          It is kept in this tab only.</p>
        <label for="token">Token</label>
        <input id="token" type="password" autoComplete="off" required value={token}
               onInput={(e) => setToken(e.currentTarget.value)} />
        <label for="principal">Act as principal</label>
        <input id="principal" value={principal} placeholder="user:alice (empty for a user token)"
               onInput={(e) => setPrincipal(e.currentTarget.value)} />
        <button type="submit" disabled={busy}>Sign in</button>
        <ErrorLine error={error} />
      </form>
    </main>
  );
}

function Page({ api, route }: { api: Api; route: string[] }) {
  const [page, arg] = route;
  switch (page) {
    case "runs": return arg ? <RunPage api={api} runId={arg} key={arg} /> : <RunsPage api={api} />;
    case "approvals": return <ApprovalsPage api={api} />;
    case "sessions": return <SessionsPage api={api} />;
    case "journal": return <JournalPage api={api} />;
    case "channels": return <ChannelsPage api={api} />;
    case "learning": return <LearningPage api={api} />;
    case "agents": return <AgentsPage api={api} />;
    case "memory": return <MemoryPage api={api} />;
    case "ops": return <OpsPage api={api} />;
    default: return <ChatPage api={api} sessionId={arg ?? ""} />;
  }
}

function App() {
  const [credentials, setCredentials] = useState<Credentials | null>(loadCredentials);
  const route = useHash();
  const api = useMemo(() => (credentials ? createApi(credentials) : null), [credentials]);
  if (!credentials || !api) return <SignIn onSignedIn={setCredentials} />;
  const current = route[0] ?? "chat";
  const signOut = () => { forgetCredentials(); setCredentials(null); };
  return (
    <div class="shell">
      <a class="skip" href="#main">Skip to content</a>
      <nav aria-label="Console">
        <span class="brand">palyra</span>
        <ul>
          {NAV.filter((r) => !r.operator || credentials.operator).map((r) => (
            <li key={r.path}>
              <a href={`#/${r.path}`} aria-current={current === r.path ? "page" : undefined}>{r.label}</a>
            </li>
          ))}
        </ul>
        <span class="who" title={credentials.operator ? "operator token" : "user token"}>
          {credentials.principal || "token principal"}{credentials.operator ? " · operator" : ""}
        </span>
        <button class="link" onClick={signOut}>Sign out</button>
      </nav>
      <main id="main" tabIndex={-1}>
        <Page api={api} route={route} />
      </main>
    </div>
  );
}

const root = document.getElementById("app")!;
root.textContent = ""; // the static "Loading…" line
render(<App />, root);
