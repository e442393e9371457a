// Who the console acts as. The token is kept in the tab's sessionStorage only:
// closing the tab forgets it, and no cookie is set. The one thing kept in
// localStorage is this browser's device id (a ULID, not a secret), because the
// daemon keys sessions by principal and device: a new tab of the same browser
// finds the same sessions.

export interface Credentials {
  token: string;
  /** `x-palyra-principal`; may be empty for a user token (the token names its principal). */
  principal: string;
  /** `x-palyra-device-id`: one ULID per browser (see deviceId). */
  device: string;
  /** Whether the token may call the operator-only RPCs (checked at sign-in). */
  operator: boolean;
}

const KEY = "palyra.console.credentials";
const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** A ULID (48-bit time, 80 random bits) for the device header. */
export function newUlid(now: number = Date.now()): string {
  let time = "";
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = CROCKFORD[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const random = crypto.getRandomValues(new Uint8Array(16));
  let rest = "";
  for (let i = 0; i < 16; i++) rest += CROCKFORD[random[i] % 32];
  return time + rest;
}

const DEVICE_KEY = "palyra.console.device";

/** This browser's `x-palyra-device-id`, made once. */
export function deviceId(): string {
  let id = localStorage.getItem(DEVICE_KEY);
  if (!id || !/^[0-9A-HJKMNP-TV-Z]{26}$/.test(id)) {
    id = newUlid();
    localStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

export function loadCredentials(): Credentials | null {
  const raw = sessionStorage.getItem(KEY);
  if (!raw) return null;
  try {
    const value = JSON.parse(raw) as Credentials;
    return typeof value.token === "string" && value.token ? value : null;
  } catch {
    return null;
  }
}

export function saveCredentials(credentials: Credentials): void {
  sessionStorage.setItem(KEY, JSON.stringify(credentials));
}

export function forgetCredentials(): void {
  sessionStorage.removeItem(KEY);
}

export function authHeaders(c: Credentials): Record<string, string> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${c.token}`,
    "x-palyra-device-id": c.device,
  };
  if (c.principal) headers["x-palyra-principal"] = c.principal;
  return headers;
}
