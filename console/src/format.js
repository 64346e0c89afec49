// Small formatters shared by the pages.

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

export function time(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function percent(part, whole) {
  return whole ? `${((100 * part) / whole).toFixed(1)} %` : "–";
}

// An entry's payload as text when it is printable UTF-8, else as hex.
export function payloadText(buffer, hex) {
  const data = new Uint8Array(buffer);
  if (!hex) {
    try {
      const text = new TextDecoder("utf-8", { fatal: true }).decode(data);
      if (!/[\x00-\x08\x0e-\x1f\x7f]/.test(text)) return { text, hex: false };
    } catch (_) {
      /* not UTF-8: hex below */
    }
  }
  const shown = data.subarray(0, 4096);
  const lines = [];
  for (let i = 0; i < shown.length; i += 16) {
    const row = Array.from(shown.subarray(i, i + 16), (b) => b.toString(16).padStart(2, "0"));
    lines.push(`${i.toString(16).padStart(8, "0")}  ${row.join(" ")}`);
  }
  if (data.length > shown.length) lines.push(`… ${data.length - shown.length} more bytes`);
  return { text: lines.join("\n"), hex: true };
}
