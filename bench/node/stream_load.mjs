// Load generator for ledgerd append streams (DESIGN.md §5a), in Node.js with `ws`,
// so that the figure measures the server, not a Python client.
//
//   node stream_load.mjs '<json config>'
//
// config: {"url": "ws://127.0.0.1:8080", "ledgers": [3, 4], "password": "",
//          "in_flight": 16, "entries": 1, "entry_bytes": 1024, "duration_s": 5,
//          "rate_per_s": null}
// One stream per ledger.  Closed loop (rate_per_s null): each stream keeps
// `in_flight` messages unacknowledged.  Open loop (rate_per_s set): messages are
// sent on a fixed schedule across all streams, whatever the acks do, and latency
// counts from the scheduled time.  Prints one JSON object: messages and entries
// acked inside the measured window, latency percentiles (send or schedule to
// ack), errors.
import WebSocket from "ws";
import { performance } from "node:perf_hooks";

const cfg = JSON.parse(process.argv[2]);
const message = buildMessage(cfg.entries, cfg.entry_bytes);
const latencies = [];
const errors = [];
let ackedMessages = 0;
let running = false;
let windowStart = 0;
let windowEnd = Infinity;

function buildMessage(entries, size) {
  const buf = Buffer.alloc(8 + entries * (4 + size), 0x61);
  buf.fill(0xff, 0, 8); // first_entry_id 2^64-1: the server assigns
  for (let i = 0, at = 8; i < entries; i++, at += 4 + size) buf.writeUInt32BE(size, at);
  return buf;
}

function open(ledger) {
  // cfg.path (optional): another stream route, e.g. the floor /api/v1/noop/stream
  const url = cfg.path ? `${cfg.url}${cfg.path}` : `${cfg.url}/api/v1/ledgers/${ledger}/entries/stream`;
  const headers = cfg.password ? { "X-Ledger-Password": cfg.password } : {};
  const ws = new WebSocket(url, "ledgerd.v1", {
    perMessageDeflate: false, headers, maxPayload: 64 * 1024 * 1024,
  });
  const stream = { ws, sent: [], head: 0, closed: false };
  ws.on("message", (data) => onMessage(stream, data));
  ws.on("close", (code) => {
    stream.closed = true;
    if (running) errors.push(`stream to ledger ${ledger} closed with ${code}`);
  });
  ws.on("error", (err) => errors.push(String(err)));
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve(stream));
    ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade: ${res.statusCode}`)));
    ws.once("error", reject);
  });
}

function send(stream, at) {
  stream.sent.push(at);
  stream.ws.send(message);
}

function onMessage(stream, data) {
  const now = performance.now();
  const reply = JSON.parse(data);
  if (reply.error) {
    errors.push(`message ${reply.seq}: ${reply.error.code} ${reply.error.detail}`);
    return;
  }
  for (let i = 0; i < reply.acks.length; i++) {
    const sentAt = stream.sent[stream.head++];
    if (now >= windowStart && now <= windowEnd) {
      latencies.push(now - sentAt);
      ackedMessages++;
    }
    if (running && cfg.rate_per_s == null) send(stream, performance.now());
  }
  if (stream.head > 4096) { // forget acknowledged send times
    stream.sent = stream.sent.slice(stream.head);
    stream.head = 0;
  }
}

function pace(streams) {
  // Open loop: message k of the run is due at windowStart + k / rate, sent by
  // stream k % streams; a timer tick sends everything due by now.
  const interval = 1000 / cfg.rate_per_s;
  let k = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    while (running && windowStart + k * interval <= now) {
      send(streams[k % streams.length], windowStart + k * interval);
      k++;
    }
  }, 1);
  return timer;
}

function percentile(sorted, q) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.round((q / 100) * (sorted.length - 1))));
  return sorted[i];
}

async function main() {
  const streams = await Promise.all(cfg.ledgers.map(open));
  running = true;
  windowStart = performance.now();
  let timer = null;
  if (cfg.rate_per_s == null) {
    for (const s of streams) for (let i = 0; i < cfg.in_flight; i++) send(s, performance.now());
  } else {
    timer = pace(streams);
  }
  await new Promise((resolve) => setTimeout(resolve, cfg.duration_s * 1000));
  windowEnd = performance.now();
  running = false;
  if (timer) clearInterval(timer);
  // Let what is in flight land before closing, so the server sees clean closes.
  const drained = performance.now() + 10000;
  while (streams.some((s) => !s.closed && s.head < s.sent.length) && performance.now() < drained) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  for (const s of streams) s.ws.close(1000);
  latencies.sort((a, b) => a - b);
  const elapsed = (windowEnd - windowStart) / 1000;
  process.stdout.write(JSON.stringify({
    acked_messages: ackedMessages,
    acked_entries: ackedMessages * cfg.entries,
    duration_s: elapsed,
    p50_ms: percentile(latencies, 50),
    p99_ms: percentile(latencies, 99),
    max_ms: percentile(latencies, 100),
    errors: errors.slice(0, 10),
  }) + "\n");
  setTimeout(() => process.exit(0), 200);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err)] }) + "\n");
  process.exit(1);
});
