// The console's pages.  Each polls the API it shows and redraws in place.
import { useRef, useState } from "preact/hooks";
import { api, metrics } from "./api.js";
import { bytes, percent, time, payloadText } from "./format.js";
import { html, usePoll, ErrorNote, Progress, Chart, Action } from "./ui.js";

const HISTORY = 300; // chart points kept (one a second: five minutes)

async function clusterOrNull() {
  try {
    return await api("/api/v1/cluster");
  } catch (error) {
    if (error.status === 409) return null; // standalone
    throw error;
  }
}

// --- overview ------------------------------------------------------------------

export function Overview({ admin }) {
  const history = useRef({ t: [], adds: [], latency: [], last: null });
  const [series, setSeries] = useState({ adds: [[], []], latency: [[], []] });
  const { data, error, refresh } = usePoll(async () => {
    const [info, state, mark, values, cluster] = await Promise.all([
      api("/api/v1/bookie/info"),
      api("/api/v1/bookie/state"),
      api("/api/v1/bookie/last_log_mark"),
      metrics(),
      clusterOrNull(),
    ]);
    const h = history.current;
    const now = Date.now() / 1000;
    const sample = {
      t: now,
      adds: values.ledgerd_bookie_adds_total || 0,
      sum: values.ledgerd_add_latency_seconds_sum || 0,
      count: values.ledgerd_add_latency_seconds_count || 0,
    };
    if (h.last) {
      const dt = Math.max(1e-3, sample.t - h.last.t);
      const dcount = sample.count - h.last.count;
      h.t.push(now);
      h.adds.push(Math.max(0, (sample.adds - h.last.adds) / dt));
      h.latency.push(dcount > 0 ? (1000 * (sample.sum - h.last.sum)) / dcount : 0);
      if (h.t.length > HISTORY) ["t", "adds", "latency"].forEach((k) => h[k].shift());
      setSeries({ adds: [h.t.slice(), h.adds.slice()], latency: [h.t.slice(), h.latency.slice()] });
    }
    h.last = sample;
    return { info, state, mark, values, cluster };
  }, 1000);
  if (!data) return html`<h1>Overview</h1><${ErrorNote} error=${error} /><p>Loading…</p>`;
  const { info, state, mark, values, cluster } = data;
  const v = (name) => values[`ledgerd_bookie_${name}`] || 0;
  return html`
    <h1>Overview</h1>
    <${ErrorNote} error=${error} />
    <section aria-labelledby="node-h">
      <h2 id="node-h">Node</h2>
      <dl class="facts" data-testid="node-facts">
        <dt>Bookie</dt><dd data-testid="bookie-id">${info.bookie_id}</dd>
        <dt>Cluster</dt><dd>${info.cluster}</dd>
        <dt>Version</dt><dd>${info.version}</dd>
        <dt>Mode</dt><dd data-testid="read-only">${state.read_only ? "read-only" : "writable"}</dd>
        <dt>Ledgers</dt><dd data-testid="ledger-count">${v("ledger_count")}</dd>
        <dt>GC</dt><dd>${info.gc_enabled ? "on" : "off"}</dd>
        <dt>Offload</dt><dd>${info.offload_enabled ? "on" : "off"}</dd>
      </dl>
      ${admin && html`<p class="admin-actions">
        <${Action} label=${state.read_only ? "Leave read-only mode" : "Enter read-only mode"}
          testid="toggle-read-only" danger=${!state.read_only}
          run=${() => api("/api/v1/bookie/state/readonly", { method: "PUT", body: { read_only: !state.read_only } })}
          onDone=${refresh} />
      </p>`}
    </section>
    <section aria-labelledby="charts-h">
      <h2 id="charts-h">Traffic</h2>
      <div class="charts">
        <${Chart} title="Adds" unit="entries/s" data=${series.adds} testid="chart-adds" />
        <${Chart} title="Add latency (mean)" unit="ms" data=${series.latency} testid="chart-latency" />
      </div>
    </section>
    <div class="columns">
      <section aria-labelledby="disk-h">
        <h2 id="disk-h">Disk</h2>
        <dl class="facts">
          <dt>Used</dt><dd>${bytes(info.total_space - info.free_space)} of ${bytes(info.total_space)}</dd>
          <dt>Free</dt><dd>${bytes(info.free_space)} (${percent(info.free_space, info.total_space)})</dd>
          ${info.data_dir && html`<dt>Data dir</dt><dd><code>${info.data_dir}</code></dd>`}
        </dl>
      </section>
      <section aria-labelledby="journal-h">
        <h2 id="journal-h">Journal</h2>
        <dl class="facts">
          <dt>Used</dt><dd>${bytes(v("journal_used_bytes"))} of ${bytes(v("journal_capacity_bytes"))}</dd>
          <dt>Appended</dt><dd>${mark.appended_offset}</dd>
          <dt>Synced</dt><dd data-testid="journal-synced">${mark.synced_offset}</dd>
          <dt>Checkpoint</dt><dd>${mark.checkpoint_offset}</dd>
          <dt>Trimmed</dt><dd>${mark.trim_offset}</dd>
          ${info.journal_device && html`<dt>Device</dt><dd><code>${info.journal_device}</code></dd>`}
        </dl>
      </section>
      <section aria-labelledby="cache-h">
        <h2 id="cache-h">Write cache</h2>
        <dl class="facts">
          <dt>Active</dt><dd>${bytes(v("write_cache_active_bytes"))}</dd>
          <dt>Flushing</dt><dd>${bytes(v("write_cache_frozen_bytes"))}</dd>
          <dt>Capacity</dt><dd>${bytes(v("write_cache_capacity_bytes"))}</dd>
          <dt>Read cache</dt><dd>${bytes(v("read_cache_bytes"))}</dd>
        </dl>
      </section>
    </div>
    ${cluster && html`<section aria-labelledby="members-h">
      <h2 id="members-h">Cluster members</h2>
      <${Members} cluster=${cluster} />
    </section>`}
  `;
}

function Members({ cluster }) {
  return html`<table data-testid="members">
    <caption class="sr-only">Cluster members</caption>
    <thead><tr><th scope="col">Bookie</th><th scope="col">URL</th><th scope="col">State</th><th scope="col">Disk used</th><th scope="col">Role</th></tr></thead>
    <tbody>
      ${cluster.nodes.map((n) => html`<tr key=${n.bookie_id}>
        <td>${n.bookie_id}</td><td>${n.url}</td><td>${n.state}</td>
        <td>${(100 * n.disk_usage).toFixed(1)} %</td>
        <td>${n.bookie_id === cluster.auditor ? "auditor" : ""}</td>
      </tr>`)}
    </tbody>
  </table>`;
}

// --- ledgers -------------------------------------------------------------------

const PAGE = 50;

export function Ledgers() {
  const [filter, setFilter] = useState({ state: "", offload: "", metadata: "" });
  const [form, setForm] = useState(filter);
  const [cursors, setCursors] = useState([null]); // `after` of each page seen
  const after = cursors[cursors.length - 1];
  const { data, error } = usePoll(async () => {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (after !== null) q.set("after", String(after));
    if (filter.state) q.set("state", filter.state);
    if (filter.offload) q.set("offload_state", filter.offload);
    for (const pair of filter.metadata.split(",").map((s) => s.trim()).filter(Boolean)) {
      q.append("metadata", pair);
    }
    return api(`/api/v1/ledgers?${q}`);
  }, 3000, [after, filter]);
  const submit = (event) => {
    event.preventDefault();
    setFilter(form);
    setCursors([null]);
  };
  return html`
    <h1>Ledgers</h1>
    <form class="filters" onSubmit=${submit} role="search" aria-label="Filter ledgers">
      <label>State
        <select value=${form.state} onChange=${(e) => setForm({ ...form, state: e.target.value })} data-testid="filter-state">
          <option value="">any</option><option>OPEN</option><option>FENCED</option><option>CLOSED</option>
        </select>
      </label>
      <label>Offload
        <select value=${form.offload} onChange=${(e) => setForm({ ...form, offload: e.target.value })}>
          <option value="">any</option><option>NONE</option><option>PENDING</option><option>IN_PROGRESS</option><option>OFFLOADED</option><option>FAILED</option>
        </select>
      </label>
      <label>Metadata (key=value, …)
        <input type="text" value=${form.metadata} placeholder="topic=orders" onInput=${(e) => setForm({ ...form, metadata: e.target.value })} data-testid="filter-metadata" />
      </label>
      <button type="submit" data-testid="filter-apply">Apply</button>
    </form>
    <${ErrorNote} error=${error} />
    ${data && html`
      <table data-testid="ledger-table">
        <caption class="sr-only">Ledgers, in id order</caption>
        <thead><tr><th scope="col">Id</th><th scope="col">State</th><th scope="col">LAC</th><th scope="col">Entries</th><th scope="col">Bytes</th><th scope="col">Offload</th><th scope="col">Metadata</th></tr></thead>
        <tbody>
          ${data.ledgers.map((l) => html`<tr key=${l.ledger_id}>
            <td><a href=${`#/ledgers/${l.ledger_id}`}>${l.ledger_id}</a></td>
            <td>${l.state}</td><td>${l.last_add_confirmed}</td><td>${l.entries}</td><td>${bytes(l.length)}</td>
            <td>${l.offload.state}</td>
            <td>${Object.entries(l.metadata).map(([k, v]) => `${k}=${v}`).join(", ")}</td>
          </tr>`)}
        </tbody>
      </table>
      ${data.ledgers.length === 0 && html`<p>No ledgers on this page${data.next_after !== null ? " (the filter skipped many: try the next page)" : ""}.</p>`}
      <nav class="pager" aria-label="Pages">
        <button type="button" disabled=${cursors.length === 1} onClick=${() => setCursors(cursors.slice(0, -1))}>Previous page</button>
        <span>Page ${cursors.length}</span>
        <button type="button" disabled=${data.next_after === null} data-testid="next-page"
          onClick=${() => setCursors([...cursors, data.next_after])}>Next page</button>
      </nav>`}
  `;
}

// --- one ledger ----------------------------------------------------------------

async function entryText(ledgerId, entryId, hex) {
  const response = await api(`/api/v1/ledgers/${ledgerId}/entries/${entryId}`, { raw: true });
  return payloadText(await response.arrayBuffer(), hex);
}

export function LedgerPage({ id, admin }) {
  const [hex, setHex] = useState(false);
  const [password, setPassword] = useState("");
  // The entries shown, read again only when the LAC (or the view) changes.
  const shown = useRef({ key: null, first: null, last: null });
  const { data, error, refresh } = usePoll(async () => {
    const [ledger, offload, cluster] = await Promise.all([
      api(`/api/v1/ledgers/${id}`),
      api(`/api/v1/ledgers/${id}/offload`),
      api(`/api/v1/cluster/ledgers/${id}`).catch((e) => (e.status === 409 ? null : Promise.reject(e))),
    ]);
    const lac = ledger.last_add_confirmed;
    const key = `${lac}/${hex}`;
    if (lac >= 0 && shown.current.key !== key) {
      const failed = (e) => ({ text: String(e.message) });
      const [first, last] = await Promise.all([
        entryText(id, 0, hex).catch(failed), entryText(id, lac, hex).catch(failed)]);
      shown.current = { key, first, last };
    }
    const { first, last } = lac >= 0 ? shown.current : { first: null, last: null };
    return { ledger, offload, cluster, first, last };
  }, 1000, [id, hex]);
  if (!data) return html`<h1>Ledger ${id}</h1><${ErrorNote} error=${error} /><p>Loading…</p>`;
  const { ledger, offload, cluster, first, last } = data;
  return html`
    <h1>Ledger <span data-testid="ledger-id">${id}</span></h1>
    <${ErrorNote} error=${error} />
    <dl class="facts" data-testid="ledger-facts">
      <dt>State</dt><dd data-testid="ledger-state">${ledger.state}</dd>
      <dt>Last add confirmed</dt><dd data-testid="ledger-lac">${ledger.last_add_confirmed}</dd>
      <dt>Entries</dt><dd>${ledger.entries}</dd>
      <dt>Bytes</dt><dd>${bytes(ledger.length)}</dd>
      <dt>Created</dt><dd>${time(ledger.created_at)}</dd>
      <dt>Closed</dt><dd>${time(ledger.closed_at)}</dd>
      <dt>Metadata</dt><dd>${Object.entries(ledger.metadata).map(([k, v]) => `${k}=${v}`).join(", ") || "–"}</dd>
    </dl>
    <section aria-labelledby="offload-h">
      <h2 id="offload-h">Offload and tiering</h2>
      <dl class="facts">
        <dt>Offload</dt><dd data-testid="offload-state">${offload.state}</dd>
        ${offload.state === "IN_PROGRESS" && html`<dt>Progress</dt><dd><${Progress} done=${offload.bytes_done || 0} total=${offload.bytes_total || 0} label="offload progress" /></dd>`}
        <dt>Tiered entries</dt><dd>${offload.tiered_entries}</dd>
        <dt>First local entry</dt><dd>${offload.local_first_entry_id}</dd>
        ${offload.bucket && html`<dt>Where</dt><dd><code>s3://${offload.bucket}/${offload.key_prefix || ""}</code></dd>`}
        ${offload.error && html`<dt>Error</dt><dd>${offload.error} (${offload.failures} failures, next retry ${time(offload.next_retry_at)})</dd>`}
      </dl>
    </section>
    ${cluster && html`<section aria-labelledby="frag-h">
      <h2 id="frag-h">Fragments</h2>
      <p>Ensemble ${cluster.ensemble_size}, write quorum ${cluster.write_quorum}, ack quorum ${cluster.ack_quorum}; writer ${cluster.writer} at epoch ${cluster.epoch}.</p>
      <table data-testid="fragments">
        <caption class="sr-only">Fragments of the ledger</caption>
        <thead><tr><th scope="col">First entry</th><th scope="col">Bookies</th><th scope="col">Epoch</th></tr></thead>
        <tbody>${cluster.fragments.map((f) => html`<tr key=${f.first_entry_id}>
          <td>${f.first_entry_id}</td><td>${f.bookies.join(", ")}</td><td>${f.epoch}</td></tr>`)}</tbody>
      </table>
    </section>`}
    <section aria-labelledby="entries-h">
      <h2 id="entries-h">Entries</h2>
      <label><input type="checkbox" checked=${hex} onChange=${(e) => setHex(e.target.checked)} /> Show as hex</label>
      ${first ? html`
        <h3>First entry (0)</h3><pre data-testid="first-entry">${first.text}</pre>
        <h3>Last entry (${ledger.last_add_confirmed})</h3><pre data-testid="last-entry">${last.text}</pre>`
      : html`<p>No entries yet.</p>`}
    </section>
    <section aria-labelledby="ledger-actions-h">
      <h2 id="ledger-actions-h">Actions</h2>
      <p class="hint">Fencing and closing need the ledger's password, as in the API.</p>
      <label>Ledger password <input type="password" autocomplete="off" value=${password} onInput=${(e) => setPassword(e.target.value)} data-testid="ledger-password" /></label>
      <${Action} label="Fence" testid="fence" danger=${true} onDone=${refresh}
        run=${() => api(`/api/v1/ledgers/${id}/fence`, { method: "POST", password })} />
      <${Action} label="Close" testid="close" danger=${true} onDone=${refresh}
        run=${() => api(`/api/v1/ledgers/${id}/close`, { method: "POST", password })} />
      ${admin && html`<${Action} label="Offload to S3" testid="offload" onDone=${refresh}
        run=${() => api(`/api/v1/ledgers/${id}/offload`, { method: "POST" })} />`}
    </section>
  `;
}

// --- cluster -------------------------------------------------------------------

export function ClusterPage() {
  const { data, error, loaded } = usePoll(clusterOrNull, 2000);
  if (!loaded) return html`<h1>Cluster</h1><${ErrorNote} error=${error} /><p>Loading…</p>`;
  if (data === null) return html`<h1>Cluster</h1><p data-testid="standalone">This node runs standalone (not in cluster mode).</p>`;
  return html`
    <h1>Cluster</h1>
    <${ErrorNote} error=${error} />
    ${data && html`
      <p>Auditor: <strong data-testid="auditor">${data.auditor || "none elected"}</strong></p>
      <h2>Members</h2>
      <${Members} cluster=${data} />
      <h2>Under-replicated ledgers</h2>
      ${data.under_replicated.length === 0 ? html`<p data-testid="no-under-replicated">None: every ledger has its write quorum.</p>` : html`
        <table data-testid="under-replicated">
          <caption class="sr-only">Ledgers being re-replicated</caption>
          <thead><tr><th scope="col">Ledger</th><th scope="col">Fragments</th><th scope="col">Progress</th></tr></thead>
          <tbody>${data.under_replicated.map((u) => html`<tr key=${u.ledger_id}>
            <td><a href=${`#/ledgers/${u.ledger_id}`}>${u.ledger_id}</a></td><td>${u.fragments}</td>
            <td><${Progress} done=${u.bytes_done} total=${u.bytes_total} label=${`ledger ${u.ledger_id} re-replication`} /> ${bytes(u.bytes_done)} of ${bytes(u.bytes_total)}</td></tr>`)}</tbody>
        </table>`}`}
  `;
}

// --- GC and compaction ----------------------------------------------------------

export function GcPage({ admin }) {
  const [force, setForce] = useState({ major: false, minor: false });
  const { data, error, refresh } = usePoll(async () => {
    try {
      return await api("/api/v1/bookie/gc_details");
    } catch (e) {
      if (e.status === 409) return { off: true };
      throw e;
    }
  }, 1000);
  if (!data) return html`<h1>Garbage collection</h1><${ErrorNote} error=${error} /><p>Loading…</p>`;
  if (data.off) return html`<h1>Garbage collection</h1><p>GC is off on this node.</p>`;
  const run = data.last_run;
  const suspend = (body) => api("/api/v1/bookie/gc/suspend_compaction", { method: "PUT", body });
  const resume = (body) => api("/api/v1/bookie/gc/resume_compaction", { method: "PUT", body });
  return html`
    <h1>Garbage collection and compaction</h1>
    <${ErrorNote} error=${error} />
    <dl class="facts" data-testid="gc-facts">
      <dt>Runs</dt><dd data-testid="gc-runs">${data.runs}</dd>
      <dt>Last run</dt><dd>${time(data.last_gc_time)}</dd>
      <dt>Now</dt><dd data-testid="gc-now">${data.progress.running ? html`${data.progress.kind} compaction of log ${data.progress.log_id} <${Progress} done=${data.progress.bytes_done} total=${data.progress.bytes_total} label="compaction progress" />` : data.force_compacting ? "forced run" : "idle"}</dd>
      <dt>Reclaimed by deletion</dt><dd>${bytes(data.reclaimed_by_deletion_bytes)}</dd>
      <dt>Reclaimed by compaction</dt><dd>${bytes(data.reclaimed_by_compaction_bytes)}</dd>
      <dt>Logs removed / compacted</dt><dd>${data.logs_removed} / ${data.logs_compacted}</dd>
      <dt>Major compactions</dt><dd>${data.major_compaction_count}${data.is_major_gc_suspended ? " (suspended)" : ""}</dd>
      <dt>Minor compactions</dt><dd>${data.minor_compaction_count}${data.is_minor_gc_suspended ? " (suspended)" : ""}</dd>
      <dt>Compaction failures</dt><dd>${data.compaction_failures}</dd>
    </dl>
    ${run && html`<section aria-labelledby="last-run-h">
      <h2 id="last-run-h">Last run</h2>
      <dl class="facts" data-testid="gc-last-run">
        <dt>Started</dt><dd>${time(run.started_at)}${run.forced ? " (forced)" : ""}</dd>
        <dt>Took</dt><dd>${run.duration_s.toFixed(3)} s</dd>
        <dt>Reclaimed</dt><dd>${bytes(run.reclaimed_by_deletion_bytes + run.reclaimed_by_compaction_bytes)}</dd>
        <dt>Moved</dt><dd>${run.moved_entries} entries, ${bytes(run.moved_bytes)}</dd>
        ${run.skipped.length > 0 && html`<dt>Skipped</dt><dd>${run.skipped.join("; ")}</dd>`}
        ${run.errors.length > 0 && html`<dt>Errors</dt><dd>${run.errors.join("; ")}</dd>`}
      </dl>
    </section>`}
    ${admin && html`<section aria-labelledby="gc-actions-h">
      <h2 id="gc-actions-h">Actions</h2>
      <p>
        <label><input type="checkbox" checked=${force.major} onChange=${(e) => setForce({ ...force, major: e.target.checked })} /> force major</label>
        <label><input type="checkbox" checked=${force.minor} onChange=${(e) => setForce({ ...force, minor: e.target.checked })} /> force minor</label>
        <${Action} label="Run GC now" testid="gc-run" onDone=${refresh}
          run=${() => api("/api/v1/bookie/gc", { method: "PUT", body: { force_major: force.major, force_minor: force.minor } })} />
      </p>
      <p>
        ${data.is_major_gc_suspended || data.is_minor_gc_suspended
          ? html`<${Action} key="resume" label="Resume compaction" testid="gc-resume" onDone=${refresh} run=${() => resume({ resume_major: true, resume_minor: true })} />`
          : html`<${Action} key="suspend" label="Suspend compaction" testid="gc-suspend" onDone=${refresh} run=${() => suspend({ suspend_major: true, suspend_minor: true })} />`}
      </p>
    </section>`}
  `;
}

// --- offload -------------------------------------------------------------------

export function OffloadPage() {
  const { data, error } = usePoll(async () => {
    const [values, info] = await Promise.all([metrics(), api("/api/v1/bookie/info")]);
    if (!info.offload_enabled) return { off: true };
    const [failed, running] = await Promise.all([
      api("/api/v1/ledgers?offload_state=FAILED&limit=100"),
      api("/api/v1/ledgers?offload_state=IN_PROGRESS&limit=20"),
    ]);
    const progress = await Promise.all(running.ledgers.map((l) => api(`/api/v1/ledgers/${l.ledger_id}/offload`)));
    return { values, failed: failed.ledgers, running: running.ledgers.map((l, i) => ({ ...l, offload: progress[i] })) };
  }, 2000);
  if (!data) return html`<h1>Offload</h1><${ErrorNote} error=${error} /><p>Loading…</p>`;
  if (data.off) return html`<h1>Offload</h1><p data-testid="offload-off">Offload to S3 is off on this node.</p>`;
  const v = (name) => data.values[`ledgerd_offload_${name}`] || 0;
  return html`
    <h1>Offload</h1>
    <${ErrorNote} error=${error} />
    <dl class="facts" data-testid="offload-facts">
      <dt>Queued</dt><dd data-testid="offload-queued">${v("offloads_queued")}</dd>
      <dt>In progress</dt><dd>${v("offloads_in_progress")}</dd>
      <dt>Completed</dt><dd data-testid="offload-completed">${v("offloads_completed")}</dd>
      <dt>Failed</dt><dd>${v("offloads_failed")}</dd>
      <dt>Waiting for a retry</dt><dd>${v("offloads_retry_scheduled")}</dd>
      <dt>Next retry</dt><dd>${time(v("offloads_next_retry_at"))}</dd>
    </dl>
    <h2>Running</h2>
    ${data.running.length === 0 ? html`<p>None.</p>` : html`<ul>${data.running.map((l) => html`<li key=${l.ledger_id}>
      <a href=${`#/ledgers/${l.ledger_id}`}>ledger ${l.ledger_id}</a>
      <${Progress} done=${l.offload.bytes_done || 0} total=${l.offload.bytes_total || 0} label=${`ledger ${l.ledger_id} offload`} /></li>`)}</ul>`}
    <h2>Failures</h2>
    ${data.failed.length === 0 ? html`<p>None.</p>` : html`<table>
      <caption class="sr-only">Ledgers whose offload failed</caption>
      <thead><tr><th scope="col">Ledger</th><th scope="col">Failures</th><th scope="col">Next retry</th><th scope="col">Error</th></tr></thead>
      <tbody>${data.failed.map((l) => html`<tr key=${l.ledger_id}><td><a href=${`#/ledgers/${l.ledger_id}`}>${l.ledger_id}</a></td>
        <td>${l.offload.failures}</td><td>${time(l.offload.next_retry_at)}</td><td>${l.offload.error}</td></tr>`)}</tbody>
    </table>`}
  `;
}
