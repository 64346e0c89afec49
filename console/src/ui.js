// Shared pieces: htm bound to Preact, polling, the chart, progress, errors.
import { h } from "preact";
import { useEffect, useRef, useState, useCallback } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export const html = htm.bind(h);

// Run `load` now and every `everyMs` after the previous run ends, until the
// component goes; `refresh()` runs it at once (after an action).
export function usePoll(load, everyMs, deps = []) {
  const [state, setState] = useState({ data: null, error: null, loaded: false });
  const timer = useRef(null);
  const alive = useRef(true);
  const run = useCallback(async () => {
    clearTimeout(timer.current);
    try {
      const data = await load();
      if (alive.current) setState({ data, error: null, loaded: true });
    } catch (error) {
      if (alive.current) setState((old) => ({ ...old, error }));
    }
    if (alive.current && everyMs) timer.current = setTimeout(run, everyMs);
  }, deps);
  useEffect(() => {
    alive.current = true;
    run();
    return () => {
      alive.current = false;
      clearTimeout(timer.current);
    };
  }, [run]);
  return { ...state, refresh: run };
}

export function ErrorNote({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${String(error.message || error)}</p>`;
}

export function Progress({ done, total, label }) {
  const pct = total ? Math.min(100, (100 * done) / total) : 0;
  return html`<span class="progress">
    <progress max="100" value=${pct.toFixed(1)} aria-label=${label}></progress>
    <span>${pct.toFixed(1)} %</span>
  </span>`;
}

// A uPlot line chart of [times, values] that redraws in place as data arrives.
export function Chart({ title, unit, data, testid }) {
  const box = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    const width = Math.max(280, box.current.clientWidth || 480);
    plot.current = new uPlot(
      {
        width,
        height: 180,
        scales: { x: { time: true } },
        axes: [{ stroke: "#333" }, { stroke: "#333", size: 60 }],
        legend: { show: false },
        cursor: { show: false },
        series: [{}, { label: title, stroke: "#0b5cad", width: 2, fill: "rgba(11,92,173,0.08)" }],
      },
      data,
      box.current,
    );
    return () => plot.current.destroy();
  }, []);
  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);
  const last = data[1].length ? data[1][data[1].length - 1] : null;
  return html`<figure class="chart" data-testid=${testid}>
    <figcaption>${title}: <strong data-testid=${testid + "-value"}>${last === null ? "–" : last.toFixed(1)}</strong> ${unit}</figcaption>
    <div ref=${box} role="img" aria-label=${`${title} over the last minutes`}></div>
  </figure>`;
}

// A button running an async action, showing its outcome.
export function Action({ label, run, onDone, testid, danger = false }) {
  const [busy, setBusy] = useState(false);
  const [outcome, setOutcome] = useState(null);
  const click = async () => {
    setBusy(true);
    setOutcome(null);
    try {
      await run();
      setOutcome({ ok: true, text: "done" });
      if (onDone) onDone();
    } catch (error) {
      setOutcome({ ok: false, text: String(error.message || error) });
    } finally {
      setBusy(false);
    }
  };
  return html`<span class="action">
    <button type="button" class=${danger ? "danger" : ""} disabled=${busy} onClick=${click} data-testid=${testid}>${label}</button>
    ${outcome && html`<span role="status" class=${outcome.ok ? "ok" : "error"}>${outcome.text}</span>`}
  </span>`;
}
