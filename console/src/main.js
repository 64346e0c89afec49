// The console's shell: navigation, the admin token, and the page of the URL's hash.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, adminToken, setAdminToken } from "./api.js";
import { html } from "./ui.js";
import { Overview, Ledgers, LedgerPage, ClusterPage, GcPage, OffloadPage } from "./pages.js";
import "./style.css";

const PAGES = [
  ["#/", "Overview"],
  ["#/ledgers", "Ledgers"],
  ["#/cluster", "Cluster"],
  ["#/gc", "GC and compaction"],
  ["#/offload", "Offload"],
];

function useHash() {
  const [hash, setHash] = useState(location.hash || "#/");
  useEffect(() => {
    const changed = () => setHash(location.hash || "#/");
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

// Whether this tab may use admin actions: the server shows the data directory
// only to admins (with the token, or on a loopback server without one).
async function checkAdmin() {
  const info = await api("/api/v1/bookie/info");
  return info.data_dir !== null;
}

function TokenForm({ admin, onChange }) {
  const [value, setValue] = useState("");
  const [note, setNote] = useState("");
  const submit = async (event) => {
    event.preventDefault();
    setAdminToken(value);
    setValue("");
    const ok = await checkAdmin().catch(() => false);
    if (!ok) setAdminToken("");
    setNote(ok ? "" : "That token is not this node's admin token.");
    onChange(ok);
  };
  const forget = async () => {
    setAdminToken("");
    onChange(await checkAdmin().catch(() => false));
  };
  return html`<div class="token">
    ${admin
      ? html`<span class="badge" data-testid="admin-badge">admin</span>
          ${adminToken() && html`<button type="button" onClick=${forget} data-testid="token-forget">Forget token</button>`}`
      : html`<form onSubmit=${submit} aria-label="Admin sign-in">
          <label>Admin token <input type="password" autocomplete="off" value=${value}
            onInput=${(e) => setValue(e.target.value)} data-testid="token-input" /></label>
          <button type="submit" data-testid="token-submit">Use</button>
          ${note && html`<span role="alert" class="error">${note}</span>`}
        </form>`}
  </div>`;
}

function App() {
  const hash = useHash();
  const [admin, setAdmin] = useState(false);
  useEffect(() => {
    checkAdmin().then(setAdmin, () => setAdmin(false));
  }, []);
  const ledger = /^#\/ledgers\/(\d+)$/.exec(hash);
  let page;
  if (ledger) page = html`<${LedgerPage} id=${ledger[1]} admin=${admin} key=${ledger[1]} />`;
  else if (hash === "#/ledgers") page = html`<${Ledgers} />`;
  else if (hash === "#/cluster") page = html`<${ClusterPage} />`;
  else if (hash === "#/gc") page = html`<${GcPage} admin=${admin} />`;
  else if (hash === "#/offload") page = html`<${OffloadPage} />`;
  else page = html`<${Overview} admin=${admin} />`;
  const current = ledger ? "#/ledgers" : hash;
  return html`
    <header>
      <a class="brand" href="#/">ledgerd</a>
      <nav aria-label="Console pages">
        <ul>${PAGES.map(([href, label]) => html`<li key=${href}>
          <a href=${href} aria-current=${current === href ? "page" : undefined}>${label}</a></li>`)}</ul>
      </nav>
      <${TokenForm} admin=${admin} onChange=${setAdmin} />
    </header>
    <main>${page}</main>
  `;
}

render(html`<${App} />`, document.getElementById("app"));
