-- wrk script: POST one prebuilt body again and again (bench/peer_bench.py).
-- Environment: WRK_BODY (file holding the body), WRK_CONTENT_TYPE, optional
-- WRK_PASSWORD (sent as X-Ledger-Password).  done() prints one JSON line with
-- the counts and latency percentiles (microseconds) for the caller to parse.
local file = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.body = file:read("*a")
file:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = os.getenv("WRK_CONTENT_TYPE")
local password = os.getenv("WRK_PASSWORD")
if password and password ~= "" then
  wrk.headers["X-Ledger-Password"] = password
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors_status": %d, "errors_connect": %d, ' ..
    '"errors_read": %d, "errors_write": %d, "errors_timeout": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
