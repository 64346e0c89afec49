// A TypeScript user of ledgerd: the client generated from openapi/openapi.json by
// @hey-api/openapi-ts (into ./client, at test time), against a real server.
//
//   node dist/e2e.js <base url> <admin token>
//
// Compiled with `tsc --strict`; check-no-casts.js forbids `as`, `<T>x`, `x!`, `any`
// and @ts- comments here, so everything below type-checks as generated.  It prints
// one JSON line with what it appended, for the test to read back through HTTP.

import {
  addEntries,
  addEntriesFrames,
  addEntry,
  closeLedger,
  createLedger,
  deleteLedger,
  fenceLedger,
  getLedger,
  readEntries,
  readEntriesFrames,
  readEntry,
  setReadOnly,
} from "./client";
import { client } from "./client/client.gen";
import type { EntryPage, ErrorCode, Problem } from "./client";

const PASSWORD = "pw";

// Exhaustive over ErrorCode: a code added to the spec breaks this build.
function advice(code: ErrorCode): string {
  switch (code) {
    case "ENOLEDGER":
      return "no such ledger";
    case "ENOENTRY":
      return "no such entry";
    case "EBADREQ":
      return "fix the request";
    case "EUA":
      return "check the password or token";
    case "EFENCED":
      return "the ledger is fenced: recover it";
    case "ECLOSED":
      return "the ledger is closed: open a new one";
    case "ECONFLICT":
      return "another payload holds that id";
    case "EREADONLY":
      return "the bookie is read-only";
    case "ETOOMANYREQUESTS":
      return "retry after Retry-After";
    case "EIO":
      return "server fault or not ready";
    case "ENOTSEALED":
      return "close the ledger first";
    case "ETOOMANYLEDGERS":
      return "delete ledgers";
    default: {
      const unknown: never = code;
      return unknown;
    }
  }
}

function fail(message: string): never {
  throw new Error(message);
}

// The value of a call that must succeed (hey-api answers {data} or {error}).
function ok<T>(
  what: string,
  result: { data: T; error: undefined } | { data: undefined; error: Problem },
): T {
  const problem = result.error;
  if (problem !== undefined) {
    fail(`${what}: ${problem.status} ${problem.code} (${advice(problem.code)}): ${problem.detail}`);
  }
  return result.data;
}

// The problem of a call that must fail with `status` and `code`.
function refused(
  what: string,
  result: { data: unknown; error: Problem | undefined; response: Response },
  status: number,
  code: ErrorCode,
): Problem {
  const problem = result.error;
  if (problem === undefined) {
    return fail(`${what}: succeeded (${result.response.status}), expected ${status} ${code}`);
  }
  if (result.response.status !== status || problem.status !== status || problem.code !== code) {
    fail(`${what}: ${result.response.status} ${problem.code}, expected ${status} ${code}`);
  }
  const contentType = result.response.headers.get("content-type") ?? "";
  if (!contentType.startsWith("application/problem+json")) {
    fail(`${what}: a problem answered as ${contentType}`);
  }
  return problem;
}

function bytes(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(text);
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((value, index) => value === b[index]);
}

function base64(data: Uint8Array): string {
  return Buffer.from(data).toString("base64");
}

// Upload frames: u32 big-endian length, payload.
function encodeFrames(payloads: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(payloads.reduce((sum, p) => sum + 4 + p.length, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const payload of payloads) {
    view.setUint32(at, payload.length);
    out.set(payload, at + 4);
    at += 4 + payload.length;
  }
  return out;
}

interface Frame {
  entryId: bigint;
  crc32c: number;
  payload: Uint8Array;
}

// Download frames: u64 entry id, u32 crc32c, u32 length (big-endian), payload.
function decodeFrames(body: Uint8Array): Frame[] {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const frames: Frame[] = [];
  let at = 0;
  while (at < body.length) {
    if (body.length - at < 16) fail(`cut frame header at byte ${at}`);
    const length = view.getUint32(at + 12);
    if (body.length - at - 16 < length) fail(`cut frame at byte ${at}`);
    frames.push({
      entryId: view.getBigUint64(at),
      crc32c: view.getUint32(at + 8),
      payload: body.slice(at + 16, at + 16 + length),
    });
    at += 16 + length;
  }
  return frames;
}

async function main(): Promise<void> {
  const [baseUrl, token] = process.argv.slice(2);
  if (baseUrl === undefined || token === undefined) {
    fail("usage: e2e.js <base url> <admin token>");
  }
  client.setConfig({ baseUrl });
  const headers = { "X-Ledger-Password": PASSWORD };

  const body = { password: PASSWORD, metadata: { client: "typescript" } };
  const created = ok("create", await createLedger({ body }));
  if (created.state !== "OPEN" || created.last_add_confirmed !== -1) {
    fail(`created ${JSON.stringify(created)}`);
  }
  const path = { ledger_id: created.ledger_id };

  // A raw append: the bytes as they are.
  const raw = new Uint8Array([0, 1, 2, 253, 254, 255]);
  const added = ok("add_entry", await addEntry({ path, headers, body: new Blob([raw]) }));
  if (added.entry_id !== 0) fail(`raw append got id ${added.entry_id}`);
  // The same bytes sent as JSON would be stored as JSON text: refused.
  const asJson = { ...headers, "Content-Type": "application/json" };
  refused("add_entry as JSON", await addEntry({ path, headers: asJson, body: new Blob([raw]) }),
    415, "EBADREQ");

  // A JSON batch (base64 payloads) and a frames batch.
  const json = [bytes("alpha"), bytes("")];
  const batch = ok("add_entries",
    await addEntries({ path, headers, body: { entries: json.map(base64) } }));
  if (batch.first_entry_id !== 1 || batch.last_entry_id !== 2) {
    fail(`JSON batch ${JSON.stringify(batch)}`);
  }
  const framed = [bytes("gamma"), new Uint8Array(300).fill(7)];
  const frames = ok("add_entries_frames",
    await addEntriesFrames({ path, headers, body: new Blob([encodeFrames(framed)]) }));
  if (frames.first_entry_id !== 3 || frames.last_add_confirmed !== 4) {
    fail(`frames batch ${JSON.stringify(frames)}`);
  }
  const appended = [raw, ...json, ...framed];

  // One entry, with its headers.
  const one = await readEntry({ path: { ...path, entry_id: 0 } });
  const payload = new Uint8Array(await ok("read_entry", one).arrayBuffer());
  if (!equal(payload, raw)) fail(`read_entry: ${payload}`);
  if (one.response.headers.get("X-Crc32c") !== String(added.crc32c)) fail("read_entry: X-Crc32c");
  if (one.response.headers.get("X-Last-Add-Confirmed") !== "4") {
    fail("read_entry: X-Last-Add-Confirmed");
  }

  // A range as a JSON page, a page at a time.
  const paged: Uint8Array[] = [];
  let start: number | null = 0;
  while (start !== null) {
    const page: EntryPage = ok("read_entries",
      await readEntries({ path, query: { start, limit: 2 } }));
    for (const entry of page.entries) {
      if (entry.entry_id !== paged.length) fail(`read_entries: entry ${entry.entry_id} misplaced`);
      paged.push(new Uint8Array(Buffer.from(entry.payload, "base64")));
    }
    start = page.next_start;
  }
  const same = (read: Uint8Array[], from: number): boolean =>
    read.every((p, i) => equal(p, appended[from + i] ?? fail("more entries than appended")));
  if (paged.length !== appended.length || !same(paged, 0)) fail("read_entries: payloads differ");

  // The same range as frames.
  const stream = ok("read_entries_frames",
    await readEntriesFrames({ path, query: { start: 1, end: 4 } }));
  const read = decodeFrames(new Uint8Array(await stream.arrayBuffer()));
  if (read.map((f) => Number(f.entryId)).join() !== "1,2,3,4") fail("read_entries_frames: ids");
  if (!same(read.map((f) => f.payload), 1)) fail("read_entries_frames: payloads differ");

  // Problems, by code.
  refused("read beyond the end", await readEntry({ path: { ...path, entry_id: 5 } }),
    404, "ENOENTRY");
  const wrong = { "X-Ledger-Password": "nope" };
  refused("wrong password", await addEntry({ path, headers: wrong, body: new Blob([raw]) }),
    403, "EUA");
  refused("end below start", await readEntries({ path, query: { start: 3, end: 1 } }),
    400, "EBADREQ");
  refused("empty batch", await addEntries({ path, headers, body: { entries: [] } }),
    400, "EBADREQ");

  // Fence, then close: adds are refused with the ledger's state.
  const fenced = ok("fence", await fenceLedger({ path, headers }));
  if (fenced.state !== "FENCED") fail(`fence: ${fenced.state}`);
  const late = refused("add after fence",
    await addEntry({ path, headers, body: new Blob([raw]) }), 409, "EFENCED");
  const closed = ok("close", await closeLedger({ path, headers }));
  if (closed.state !== "CLOSED" || closed.last_add_confirmed !== 4) {
    fail(`close: ${JSON.stringify(closed)}`);
  }
  refused("add after close", await addEntry({ path, headers, body: new Blob([raw]) }),
    409, "ECLOSED");

  // Admin: the bearer token goes with the operations the spec marks.
  refused("read-only without token", await setReadOnly({ body: { read_only: false } }),
    401, "EUA");
  const writable = ok("read-only with token",
    await setReadOnly({ auth: token, body: { readOnly: false } }));
  if (writable.read_only) fail("still read-only");

  // A second ledger, deleted: 404 from then on.
  const doomed = ok("create", await createLedger({ body: {} }));
  const gone = { ledger_id: doomed.ledger_id };
  const deleted = await deleteLedger({ path: gone });
  if (deleted.error !== undefined || deleted.response.status !== 204) fail("delete");
  const missing = refused("get deleted", await getLedger({ path: gone }), 404, "ENOLEDGER");

  const final = ok("get", await getLedger({ path }));
  console.log(JSON.stringify({
    ledger_id: final.ledger_id,
    state: final.state,
    length: final.length,
    payloads: appended.map(base64),
    advice: [advice(late.code), advice(missing.code)],
  }));
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
