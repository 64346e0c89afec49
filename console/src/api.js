// Calls to this node's API.  The admin token lives in this tab's sessionStorage
// and travels only as `Authorization: Bearer` (never in a URL, never a cookie).

const TOKEN_KEY = "ledgerd.adminToken";

export function adminToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setAdminToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${problem.code || status}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// fetch() one API path; JSON in and out unless `raw` (then the Response).
export async function api(path, { method = "GET", body, password, raw = false } = {}) {
  const headers = {};
  const token = adminToken();
  if (token) headers["Authorization"] = `Bearer ${token}`;
  if (password !== undefined) headers["X-Ledger-Password"] = encodePassword(password);
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  if (!response.ok) {
    let problem = null;
    try {
      problem = await response.json();
    } catch (_) {
      /* not a problem document */
    }
    throw new ApiError(response.status, problem);
  }
  if (raw) return response;
  return response.json();
}

// docs/api.md: a password that is not plain printable ASCII goes as an RFC 8187 ext-value.
function encodePassword(password) {
  const plain = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(password) && !/^utf-8''/i.test(password);
  return password === "" || plain ? password : "UTF-8''" + encodeURIComponent(password);
}

// The Prometheus text of /metrics as { name: summed value } (labels summed over).
export async function metrics() {
  const response = await api("/metrics", { raw: true });
  return parseMetrics(await response.text());
}

export function parseMetrics(text) {
  const values = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const value = Number(match[3]);
    if (Number.isFinite(value)) values[match[1]] = (values[match[1]] || 0) + value;
  }
  return values;
}
